//go:build !race

package trainer_test

const raceEnabled = false
