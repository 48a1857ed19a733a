//go:build race

package trainer_test

const raceEnabled = true
