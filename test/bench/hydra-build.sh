#!/usr/bin/env bash
# Builds Ory Hydra v2.3.0 from its Go module for the OAuth 2.0 bench row (test/bench/oauth2.ts):
# bench only, never in CI. `go install github.com/ory/hydra/v2@v2.3.0` refuses the module because
# its go.mod has replace directives, so it is built as a tool of a scratch module carrying the one
# replace that matters (the pop fork Hydra's persister needs); `-tags sqlite` for the in-memory
# DSN (cgo: a C compiler is needed). Takes many minutes on a busy machine; run it niced.
set -euo pipefail
GO=${GO:-$(command -v go || echo /usr/local/go/bin/go)}
OUT=${HYDRA_BIN:-$HOME/.cache/platform-core/hydra-bin/hydra}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
"$GO" mod init hydra-bench >/dev/null
"$GO" get -tool github.com/ory/hydra/v2@v2.3.0
"$GO" mod edit -replace github.com/gobuffalo/pop/v6=github.com/ory/pop/v6@v6.2.1-0.20241121111754-e5dfc0f3344b
"$GO" mod tidy
mkdir -p "$(dirname "$OUT")"
CGO_ENABLED=1 nice -n 19 "$GO" build -tags sqlite,sqlite_omit_load_extension -o "$OUT" github.com/ory/hydra/v2
echo "$OUT"
