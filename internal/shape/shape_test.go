package shape

import (
	"errors"
	"math"
	"testing"
)

func TestElements(t *testing.T) {
	for _, tc := range []struct {
		dims []int64
		want int64
		err  bool
	}{
		{nil, 1, false},
		{[]int64{0}, 0, false},
		{[]int64{784, 10}, 7840, false},
		{[]int64{1 << 24, 1 << 24}, 1 << 48, false},
		{[]int64{1<<24 + 1, 1 << 24}, 0, true},
		{[]int64{3, 1 << 62}, 0, true}, // wraps negative in int64
		{[]int64{4, 1 << 62}, 0, true}, // wraps to zero in int64
		{[]int64{1 << 32, 1 << 32}, 0, true},
		{[]int64{0, math.MaxInt64, 2}, 0, false}, // a zero dim is fine, whatever follows
		{[]int64{-1, 5}, 0, true},
		{[]int64{math.MaxInt64}, 0, true},
	} {
		got, err := Elements(tc.dims)
		if tc.err {
			if !errors.Is(err, ErrTooLarge) {
				t.Errorf("Elements(%v) = %d, %v; want ErrTooLarge", tc.dims, got, err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("Elements(%v) = %d, %v; want %d", tc.dims, got, err, tc.want)
		}
	}
}

func TestMulAdd(t *testing.T) {
	if _, ok := Mul(math.MaxInt64/2+1, 2); ok {
		t.Error("Mul overflow not reported")
	}
	if v, ok := Mul(math.MaxInt64/2, 2); !ok || v != math.MaxInt64-1 {
		t.Errorf("Mul = %d, %v", v, ok)
	}
	if _, ok := Add(math.MaxInt64, 1); ok {
		t.Error("Add overflow not reported")
	}
	if v, ok := Add(math.MaxInt64-1, 1); !ok || v != math.MaxInt64 {
		t.Errorf("Add = %d, %v", v, ok)
	}
}
