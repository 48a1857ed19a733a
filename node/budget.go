package node

import (
	"bufio"
	"bytes"
	"os"
	"strconv"
)

// Memory budgets (Config.PServerMemoryBudget, Config.TrainerMemoryBudget).
//
// A node's pserver slots together, and each of its trainers, allocate
// within a budget of bytes the node announces in gossip
// (gossip.Meta.PServerBudget, TrainerBudget). The master admits a job
// against the announced budgets (master.Service.SubmitJob, ResourceExhausted
// naming the need and the capacity) and the pserver agent claims a slot
// only if it fits in what the node's budget has left (an event naming the
// figures otherwise): a job that does not fit fails or waits, the node is
// never run out of memory.

// fallbackMemory is assumed when the machine's memory cannot be read.
const fallbackMemory = 4 << 30

// MachineMemory returns MemTotal of /proc/meminfo in bytes, or
// fallbackMemory.
func MachineMemory() uint64 {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return fallbackMemory
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := bytes.Fields(sc.Bytes())
		if len(f) >= 2 && string(f[0]) == "MemTotal:" {
			kib, err := strconv.ParseUint(string(f[1]), 10, 64)
			if err == nil && kib > 0 {
				return kib << 10
			}
		}
	}
	return fallbackMemory
}

// defaultBudgets are half of the machine's memory for pserver slots and a
// quarter for each trainer.
func defaultBudgets() (pserver, trainer uint64) {
	m := MachineMemory()
	return m / 2, m / 4
}
