package integration

import "google.golang.org/grpc/status"

func grpcCode(err error) string { return status.Code(err).String() }
