package provider_test

import (
	"context"
	"fmt"
	"net/http"

	"github.com/retrysafe/retrysafe/client"
	"github.com/retrysafe/retrysafe/examples/payments/provider"
)

// A charge whose answer is lost is retried by client.Transport with the
// same Idempotency-Key: the provider answers from its record and charges
// once.
func ExampleServer() {
	psp := provider.New(provider.Config{})
	url, err := psp.Start("127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	defer psp.Close()
	psp.InjectNext(provider.FaultDropAfterCharge, 1) // charge, then lose the answer

	c := &provider.Client{BaseURL: url, HTTP: &http.Client{Transport: &client.Transport{}}}
	ctx := client.WithKey(context.Background(), "order-42-charge")
	ch, err := c.Charge(ctx, provider.ChargeRequest{Amount: 49900, Currency: "UAH", Reference: "order-42"})
	if err != nil {
		panic(err)
	}
	fmt.Println(ch.Status, ch.Amount, ch.Currency)
	fmt.Println("charges:", psp.ChargeCount())
	// Output:
	// succeeded 49900 UAH
	// charges: 1
}
