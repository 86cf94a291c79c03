package retrysafegrpc_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"github.com/retrysafe/retrysafe/internal/scopehash"
	"testing"

	retrysafegrpc "github.com/retrysafe/retrysafe/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
)

func TestScopeFromPeerCertificate(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	withCert := peer.NewContext(ctx, &peer.Peer{AuthInfo: credentials.TLSInfo{State: tls.ConnectionState{
		PeerCertificates: []*x509.Certificate{{Raw: []byte("leaf")}, {Raw: []byte("ca")}}}}})
	noCert := peer.NewContext(ctx, &peer.Peer{AuthInfo: credentials.TLSInfo{}})
	for name, c := range map[string]struct {
		ctx  context.Context
		want string
	}{
		"client certificate": {withCert, scopehash.Sum("leaf")},
		"TLS without one":    {noCert, ""},
		"no peer":            {ctx, ""},
	} {
		got, err := retrysafegrpc.ScopeFromPeerCertificate(c.ctx)
		if err != nil || got != c.want {
			t.Errorf("%s: %q, %v; want %q", name, got, err, c.want)
		}
	}
	// Client metadata does not reach the default scope.
	spoof := metadata.NewIncomingContext(noCert, metadata.Pairs("authorization", "Bearer x", "scope", "y"))
	if got, _ := retrysafegrpc.ScopeFromPeerCertificate(spoof); got != "" {
		t.Errorf("scope from metadata: %q", got)
	}
}

func TestScopeFromMetadata(t *testing.T) {
	t.Parallel()
	f := retrysafegrpc.ScopeFromMetadata("Authorization")
	in := func(kv ...string) context.Context {
		return metadata.NewIncomingContext(context.Background(), metadata.Pairs(kv...))
	}
	a, _ := f(in("authorization", "Bearer a"))
	b, _ := f(in("authorization", "Bearer b"))
	empty, _ := f(in("authorization", ""))
	none, _ := f(context.Background())
	if a != scopehash.Sum("Bearer a") || a == b || empty != "" || none != "" {
		t.Fatalf("scopes %q %q %q %q", a, b, empty, none)
	}
}
