package retrysafe

import "testing"

// TestFingerprintGolden pins the fingerprints of ordinary requests. A change
// here breaks every in-flight key across an upgrade: a retry sent to the new
// version would get 422 instead of its replay. If the encoding must change,
// bump fingerprintVersion and say so in CHANGELOG.md.
func TestFingerprintGolden(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		in   fpInput
		want string
	}{
		"payment with query and ignore": {
			fpInput{method: "POST", path: "/v1/payments", query: "expand=customer&expand=payment_method&limit=3",
				body: []byte(paymentJSON), ignore: []string{"/metadata/requestedAt"}},
			"3468aa528c2b44598580f5a66d1605fbdc1cd17f01b4e2050484ea00aaafe88a",
		},
		"lowercase method, numbers": {
			fpInput{method: "post", path: "/v1/payments",
				body: []byte(`{"Amount":1999,"currency":"eur","items":[1.50,2e3,-0,12345678901234567890123]}`)},
			"a9f6fe7638dad9a0c48a0a782344092bc628a3fb0bf6ed7e8c07d53a767a4db5",
		},
		"form body": {
			fpInput{method: "PATCH", path: "/orders/ord_1/refunds", query: "a=1&b=2", body: []byte("amount=5&currency=eur")},
			"4a7b6d040e2ebc0313283efc09a499849bc12f6e0090464b5cb6d6746013c562",
		},
		"no body": {
			fpInput{method: "POST", path: "/p"},
			"cf7f49e5ba65b63f7cee590b523ac867d85f74d2638856cafb39b51ed5d9c84d",
		},
		"huge exponents": {
			fpInput{method: "POST", path: "/p", body: []byte(`[1e99999999999999999999999,-25e-99999999999999999999999]`)},
			"04a76a79afdd148ee7d6a6465a198aaf535d62e470bf4dc9010a22ab358eb018",
		},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			if got := tt.in.fingerprint(); got != tt.want {
				t.Fatalf("Fingerprint(%+v)\n = %s\nwant %s (pinned: in-flight keys depend on it)", tt.in, got, tt.want)
			}
		})
	}
}
