package provider

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
)

// Client calls a provider. Its HTTP client decides retries and keys: the
// payments service gives it a retrysafe client.Transport, and the context
// of Charge carries the Idempotency-Key (client.WithKey or
// client.WithDerivedKey).
type Client struct {
	BaseURL string
	HTTP    *http.Client
}

// Charge asks the provider to charge req. It returns the charge when the
// provider answered definitely: succeeded (201, or 200 for a replay) or
// declined (402). Any other outcome — an error, a timeout, a dropped
// connection, a 5xx after the transport's retries — is returned as an error:
// the charge may or may not exist, and only a lookup by key can tell.
func (c *Client) Charge(ctx context.Context, req ChargeRequest) (*Charge, error) {
	body, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	hr, err := http.NewRequestWithContext(ctx, http.MethodPost, c.BaseURL+"/charges", bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	hr.Header.Set("Content-Type", "application/json")
	resp, err := c.HTTP.Do(hr)
	if err != nil {
		return nil, fmt.Errorf("provider: charge: %w", err)
	}
	defer resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusCreated, http.StatusOK, http.StatusPaymentRequired:
		var ch Charge
		if err := json.NewDecoder(resp.Body).Decode(&ch); err != nil {
			return nil, fmt.Errorf("provider: charge: reading the answer: %w", err)
		}
		return &ch, nil
	}
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	return nil, fmt.Errorf("provider: charge: %s: %s", resp.Status, bytes.TrimSpace(msg))
}

// Lookup returns the charge made with key, or ErrNoCharge when the provider
// confirms it holds none.
func (c *Client) Lookup(ctx context.Context, key string) (*Charge, error) {
	var ch Charge
	err := c.get(ctx, "/charges?key="+url.QueryEscape(key), &ch)
	if err != nil {
		return nil, err
	}
	return &ch, nil
}

// List returns every charge the provider holds.
func (c *Client) List(ctx context.Context) ([]Charge, error) {
	var out struct {
		Charges []Charge `json:"charges"`
	}
	if err := c.get(ctx, "/charges", &out); err != nil {
		return nil, err
	}
	return out.Charges, nil
}

func (c *Client) get(ctx context.Context, path string, v any) error {
	hr, err := http.NewRequestWithContext(ctx, http.MethodGet, c.BaseURL+path, nil)
	if err != nil {
		return err
	}
	resp, err := c.HTTP.Do(hr)
	if err != nil {
		return fmt.Errorf("provider: %w", err)
	}
	defer resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusOK:
		return json.NewDecoder(resp.Body).Decode(v)
	case http.StatusNotFound:
		return ErrNoCharge
	}
	return fmt.Errorf("provider: GET %s: %s", path, resp.Status)
}
