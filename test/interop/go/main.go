// A machine client and resource server built only from standard Go libraries: it reads the
// discovery document (go-oidc), gets a token with the client-credentials grant
// (golang.org/x/oauth2/clientcredentials, client_secret_basic), verifies it against the published
// JWK set, and calls an API with it. It prints one JSON line for the test that runs it.
//
// Environment: ISSUER, CLIENT_ID, CLIENT_SECRET, AUDIENCE, API_URL, SCOPE (optional).
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"

	"github.com/coreos/go-oidc/v3/oidc"
	"golang.org/x/oauth2/clientcredentials"
)

type result struct {
	Subject   string         `json:"subject"`
	Claims    map[string]any `json:"claims"`
	APIStatus int            `json:"apiStatus"`
	APIBody   string         `json:"apiBody"`
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "interop:", err)
		os.Exit(1)
	}
}

func run() error {
	ctx := context.Background()
	provider, err := oidc.NewProvider(ctx, os.Getenv("ISSUER"))
	if err != nil {
		return fmt.Errorf("discovery: %w", err)
	}
	config := clientcredentials.Config{
		ClientID:     os.Getenv("CLIENT_ID"),
		ClientSecret: os.Getenv("CLIENT_SECRET"),
		TokenURL:     provider.Endpoint().TokenURL,
	}
	if scope := os.Getenv("SCOPE"); scope != "" {
		config.Scopes = []string{scope}
	}
	token, err := config.Token(ctx)
	if err != nil {
		return fmt.Errorf("token: %w", err)
	}
	verifier := provider.VerifierContext(ctx, &oidc.Config{
		ClientID:             os.Getenv("AUDIENCE"),
		SupportedSigningAlgs: []string{oidc.ES256, oidc.EdDSA},
	})
	verified, err := verifier.Verify(ctx, token.AccessToken)
	if err != nil {
		return fmt.Errorf("verify: %w", err)
	}
	claims := map[string]any{}
	if err := verified.Claims(&claims); err != nil {
		return err
	}
	response, err := config.Client(ctx).Get(os.Getenv("API_URL"))
	if err != nil {
		return fmt.Errorf("api: %w", err)
	}
	defer response.Body.Close()
	body, _ := io.ReadAll(response.Body)
	return json.NewEncoder(os.Stdout).Encode(result{
		Subject:   verified.Subject,
		Claims:    claims,
		APIStatus: response.StatusCode,
		APIBody:   string(body),
	})
}
