package etcdapi_test

import (
	"io"

	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
)

func insecureCreds() credentials.TransportCredentials { return insecure.NewCredentials() }

type nopCloser struct{ io.Reader }

func (nopCloser) Close() error { return nil }
