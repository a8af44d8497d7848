package config

// ByteSize is a size in bytes. In YAML it is an integer or a string with a
// binary or decimal suffix: "64MiB", "4MB", "512KiB", "1GiB".
type ByteSize int64
