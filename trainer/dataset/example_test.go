package dataset_test

import (
	"fmt"

	"github.com/raftps/raftps/trainer/dataset"
)

// Every trainer derives the same shuffled order for a pass from the job's
// seed; a task names positions [begin, end) in it.
func ExamplePermutation() {
	perm := dataset.Permutation(10, 1, 0) // 10 records, seed 1, pass 0
	fmt.Println("pass 0:", perm)
	fmt.Println("pass 1:", dataset.Permutation(10, 1, 1))

	recs, _ := dataset.TaskRecords(perm, 2, 9) // task covering positions [2, 9)
	fmt.Println("task records:", recs)
	fmt.Println("batches of 3:", dataset.Batches(recs, 3))
	// Output:
	// pass 0: [0 8 9 3 7 1 5 4 6 2]
	// pass 1: [0 4 8 1 2 3 7 5 9 6]
	// task records: [9 3 7 1 5 4 6]
	// batches of 3: [[9 3 7] [1 5 4] [6]]
}
