package testbackend

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/api"
	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/operator"
	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/store"
)

// Where the backend's tokens and account settings come from: the
// configuration, an operator's tokens file (checked by package operator),
// or a development token kept in the data directory.

// loadTokens reads the tokens the backend accepts, and the per-account
// settings of a tokens file.
func (b *Backend) loadTokens(cfg Config, dataDir string) ([]api.Token, []Account, error) {
	var tokens []Token
	var accounts []Account
	var file string // the tokens file they come from, if they do
	var lines []int // of the tokens file's entries, when known
	switch {
	case len(cfg.Tokens) > 0:
		tokens = cfg.Tokens
	case cfg.TokensFile != "":
		var err error
		if tokens, accounts, lines, err = operator.ReadTokensFile[Token, Account](cfg.TokensFile, cfg.AllowSharedTokensFile); err != nil {
			return nil, nil, err
		}
		file = cfg.TokensFile
	default:
		tok, created, err := devToken(dataDir)
		if err != nil {
			return nil, nil, err
		}
		b.devToken, b.devTokenNew = tok, created
		tokens = []Token{{Token: tok, Account: "dev", Scopes: []string{api.ScopeRead, api.ScopeWrite}}}
	}
	out := make([]api.Token, 0, len(tokens))
	for _, t := range tokens {
		out = append(out, api.Token{Token: t.Token, Account: t.Account, Scopes: t.Scopes})
	}
	if err := operator.CheckTokens(out, file, lines); err != nil {
		return nil, nil, err
	}
	return out, accounts, nil
}

// accountLimits checks per-account settings and returns the vCPU limits.
func accountLimits(accounts []Account) (map[string]float64, error) {
	out := map[string]float64{}
	for i, a := range accounts {
		if a.Account == "" {
			return nil, fmt.Errorf("accounts[%d]: account is required", i)
		}
		if a.VCPULimit <= 0 {
			return nil, fmt.Errorf("accounts[%d] (%s): vcpuLimit must be a positive number of vCPUs, got %v", i, a.Account, a.VCPULimit)
		}
		out[a.Account] = a.VCPULimit
	}
	return out, nil
}

// devToken reads the development token, creating it on first use. It is
// read without following a link (a token planted as a link to a file of
// someone else's is refused) and written by rename, which replaces
// whatever is there instead of writing through it.
func devToken(dataDir string) (string, bool, error) {
	path := filepath.Join(dataDir, DevTokenFile)
	data, err := store.ReadFileNoFollow(path)
	switch {
	case err == nil:
		if tok := strings.TrimSpace(string(data)); tok != "" {
			return tok, false, nil
		}
	case !errors.Is(err, os.ErrNotExist):
		return "", false, fmt.Errorf("development token: %w", err)
	}
	var raw [24]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return "", false, err
	}
	tok := "rc_pat_" + hex.EncodeToString(raw[:])
	if err := store.WriteFileAtomic(path, []byte(tok+"\n")); err != nil {
		return "", false, fmt.Errorf("development token: %w", err)
	}
	return tok, true, nil
}
