package pool

import "testing"

func TestGetReturnsAValueNewOrPut(t *testing.T) {
	var p Pool[[4]int]
	v := p.Get()
	if v == nil || *v != [4]int{} {
		t.Fatalf("Get on an empty pool: %v, want a new zero value", v)
	}
	v[0] = 7
	p.Put(v)
	if w := p.Get(); w == nil {
		t.Fatal("Get returned nil")
	}
}
