// Package avro is the Avro payload format (issue 19): Compile compiles an
// Avro schema (a Pub/Sub schema's definition, or an .avsc file) once into a
// Codec (schema.Codec), which decodes one message's datum, in Avro's binary
// encoding (the datum alone: no container, no header, no fingerprint) or its
// JSON encoding (json.go's opening comment defines what it reads), into the
// value model (package value); checks a placeholder's path against the
// schema; and gives the schema's types for CEL's checker.
//
// What each Avro type decodes to, and what a template renders for it
// (value.Tree's AppendPath; inside a record, map or array the value is
// compact JSON as value.AppendJSON writes it):
//
//	Avro type                      decoded as       rendered as
//	null                           nil              missing_field (the template fails)
//	boolean                        bool             true | false
//	int, long                      int64            -7, 1234567890123
//	float                          float64 (1)      0.1, 21.5, NaN, Infinity, -Infinity
//	double                         float64          21.5, 1e+21, 1e-7 (as JSON writes it)
//	string                         string           its bytes, as they are
//	bytes, fixed                   []byte           its bytes, as they are (base64 inside JSON)
//	enum                           string           the symbol: WARN
//	record, map                    map[string]any   {"lat":52.5,"lon":13.4} (keys sorted; a record's
//	                                                 null field is absent (3))
//	array                          []any            [1,2.5]
//	union                          its branch's value, as above
//	timestamp-millis, -micros,     time.Time (UTC)  2024-05-06T07:08:09.123Z (always 3 digits,
//	 -nanos (2), local-timestamp-*                   truncated: micros and nanos are kept in the
//	                                                 value, not in the text)
//	date                           string           2024-05-06
//	time-millis                    string           07:08:09.123
//	time-micros                    string           07:08:09.123456
//	decimal (bytes or fixed)       value.Decimal    -12.34 (exactly scale digits after the point;
//	                                                 a number, unquoted, inside JSON)
//	uuid (string)                  string           123e4567-e89b-12d3-a456-426614174000, as sent
//	uuid (fixed 16) (2)            string           the same text, lower-case hex
//	duration (fixed 12)            []byte           its 12 bytes (months, days, millis)
//
// (1) A float becomes the float64 nearest the shortest decimal that reads
// back as the same float32, so 0.1f renders 0.1, not 0.10000000149011612.
// (2) Avro 1.12 types that hamba/avro does not know; read from the schema's
// logicalType property. A logical type on the wrong base type, or a decimal
// whose precision and scale are invalid, is ignored (its base type is used),
// as the Avro specification says.
// (3) As an unset proto field is: has(data.site) is false for a null site,
// as for a JSON payload without it, and {data.site} is missing_field either
// way. A null in a map or an array is kept (nil).
//
// # Hostile payloads
//
// A payload may be crafted; decoding never panics and its work and memory
// stay proportional to the payload:
//   - a decoded tree nests at most value.MaxDepth levels (records, maps and
//     arrays; a union adds none), whatever recursion the schema allows:
//     deeper is invalid_payload, and no decoder recursion goes further;
//   - a string, bytes or fixed whose length is more than the bytes left is
//     an error before anything is allocated;
//   - an array or map block's count n is checked before its items are read:
//     n items of a type whose smallest encoding is k > 0 bytes must fit in
//     the bytes left (n*k <= left); items that can take no bytes at all
//     (null, a record of nulls, fixed of size 0) are counted, at most
//     len(payload)+1024 of them per payload (a block count of 2^31 nulls
//     takes 5 bytes); a map's keys take a byte at least, so a map is bounded
//     by its bytes; and room for at most 1024 items is made before they are
//     read (appending grows it as they come);
//   - a bytes or fixed decimal longer than its precision needs is an error
//     (so that its conversion to text stays cheap).
//
// Binary decoding therefore makes at most F nodes per payload byte plus F per
// zero-byte item, F being a constant of the schema (how many nodes its
// records make out of their smallest encoding); JSON decoding makes at most
// one node per byte plus the defaults of missing fields. Strings (but JSON
// strings with escapes) are substrings of one copy of the payload.
//
// # Why its own decoder
//
// The schema is parsed by hamba/avro, but a datum is read by this package,
// which bounds what a hostile payload makes it do. Why not hamba/avro's
// decoder (Unmarshal into any), with its Config limits: it recurses as deep
// as the payload nests a recursive schema (a Go stack overflow is fatal, not
// a recoverable panic); its generic reader loops over a block's count
// appending an item each time, even after an error, and consults neither
// MaxSliceAllocSize (which bounds the typed decoder's items of one array,
// not zero-byte items across arrays) nor a map limit (v2.31.0 has no
// MaxMapAllocSize); and it allocates a string's claimed length, up to
// MaxByteSliceSize, before it knows the payload holds it (which a 10 MB
// payload makes 10 MB per claim). So hamba/avro parses the schema (and
// encodes the tests' payloads), and binary.go and json.go read the datum,
// faster too (BenchmarkAvroDecode).
//
// It knows neither package mapping, which names the Codec, nor another
// format.
package avro
