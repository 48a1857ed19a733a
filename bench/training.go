package bench

import "context"

func (r *runner) trainingSection(ctx context.Context, tmp string) {}
