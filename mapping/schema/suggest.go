package schema

// Closest is the candidate nearest to name by edit distance, if it is near
// enough to be a typo (at most 2 edits, and fewer than half of name's
// letters); "" otherwise.
func Closest(name string, candidates []string) string {
	best, bestD := "", 3
	for _, c := range candidates {
		d := EditDistance(name, c)
		if d < bestD && 2*d < max(len(name), len(c)) {
			best, bestD = c, d
		}
	}
	return best
}

// EditDistance is the optimal string alignment distance of a and b:
// insertions, deletions, substitutions and transpositions of adjacent
// bytes count one each (itme → item is one).
func EditDistance(a, b string) int {
	d := make([][]int, len(a)+1)
	for i := range d {
		d[i] = make([]int, len(b)+1)
		d[i][0] = i
	}
	for j := range d[0] {
		d[0][j] = j
	}
	for i := 1; i <= len(a); i++ {
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			d[i][j] = min(d[i-1][j]+1, d[i][j-1]+1, d[i-1][j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return d[len(a)][len(b)]
}
