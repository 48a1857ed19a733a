// Package dataset reads training data and decides, without coordination,
// which records a task covers.
//
// Fashion-MNIST ships with the repository as gzip IDX files (LeCun's MNIST
// format: a big-endian magic 0x00000803 for images or 0x00000801 for labels,
// one uint32 per dimension, then unsigned bytes):
//
//	train, err := dataset.LoadFashionMNIST("datasets/fashion-mnist", "train") // 60000 x 784
//	test, err := dataset.LoadFashionMNIST("datasets/fashion-mnist", "test")   // 10000 x 784
//
// Pixels become float32 in [0, 1], stored row-major in one slice
// (Dataset.Row(i) is record i). Errors say which file and why, and match
// ErrBadMagic, ErrTruncated, ErrMismatch, ErrTooLarge, ErrBadHeader,
// ErrUnknownSplit or fs.ErrNotExist with errors.Is. Headers are not
// trusted: the product of the dimensions is bounds-checked (at most 2^30
// values, no wrap-around) and buffers grow with the data that arrives, so
// a short file with a huge header allocates about what the file holds.
//
// # Tasks and passes
//
// The master cuts [0, records) into tasks; a task's [begin, end) are
// positions in the pass's shuffled order, not record ids. Every trainer
// computes that order itself:
//
//	perm := dataset.Permutation(records, spec.Seed, task.Pass)
//	recs, err := dataset.TaskRecords(perm, task.Begin, task.End)
//	for _, batch := range dataset.Batches(recs, int(spec.BatchSize)) {
//		x, y = ds.Gather(batch, x, y)
//		...
//	}
//
// Permutation depends only on (n, seed, pass) and uses a generator defined
// in this package, so trainers built with different Go versions agree, and a
// requeued task covers the same records wherever it runs.
//
// # Concurrency
//
// LoadFashionMNIST caches decoded splits per directory for the life of the
// process; concurrent callers wait for one decode and share the *Dataset,
// which must therefore be treated as read-only. All functions are safe for
// concurrent use.
package dataset
