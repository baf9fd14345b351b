// Package completer is the article's completer. It finds ride requests
// that stopped part way and that their clients seem to have given up on,
// and pushes each through to the end: the ride gets its one charge, its
// receipt job is staged, and the response is stored for a client that
// does come back.
//
// It needs no special knowledge of the ride DAG. It claims abandoned
// idempotency keys (idem.Store.ClaimAbandoned) and hands each to the same
// rides.Service the API runs, which loads the key's user and stored
// parameters and resumes from the key's recovery point: the internal path
// that lets it retry anyone's request.
package completer
