package serve

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// framing must find the same requests in a stream however the reads cut
// it: between any two bytes, or at every byte.
func TestFramingFollowsAStreamCutAnywhere(t *testing.T) {
	t.Parallel()
	stream := "POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello" +
		"POST /b HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: Chunked\r\n\r\n5;x=y\r\nhello\r\n10\r\n0123456789abcdef\r\n0\r\nX-Sum: 1\r\n\r\n" +
		"GET /c HTTP/1.1\nHost: x\n\n" +
		"POST /d HTTP/1.0\r\nConnection: keep-alive\r\nContent-Length: 0\r\n\r\n" +
		"POST /e HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nContent-Length: 3\r\n\r\nabc" +
		"POST /f HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"
	want := []bool{false, false, false, false, false, true}

	notes := func(feeds ...string) []bool {
		var f framing
		for _, p := range feeds {
			f.feed([]byte(p))
		}
		return f.notes
	}
	for i := range len(stream) + 1 {
		require.Equal(t, want, notes(stream[:i], stream[i:]), "cut at %d", i)
	}
	bytes := make([]string, len(stream))
	for i := range stream {
		bytes[i] = stream[i : i+1]
	}
	require.Equal(t, want, notes(bytes...), "a byte at a time")
}
