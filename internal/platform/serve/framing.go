package serve

import (
	"bytes"
	"context"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"

	"github.com/rocketrides/rocketrides/internal/platform/problem"
)

// Second reading: how a server refuses a request whose length is
// ambiguous, which is how request smuggling starts.
//
// A request with both Content-Length and Transfer-Encoding tells two
// lengths. net/http reads it by Transfer-Encoding alone, as RFC 9112
// section 6.1 allows, and keeps the connection open; a proxy in front
// that trusts Content-Length instead sees another request where net/http
// sees a body, and the next client's request is answered with the
// attacker's. RFC 9112 says the server must close the connection after
// answering such a request (an HTTP/1.0 request with Transfer-Encoding
// too), and may refuse it: every server here refuses it, 400
// ambiguous_framing, and closes.
//
// net/http deletes Content-Length from a request it reads by
// Transfer-Encoding before any handler sees it, so the handler cannot
// tell. What can is the connection: every byte the server reads passes
// through a framingConn, which follows the requests' framing on it
// (header, then a body of Content-Length bytes or of chunks) and notes,
// request by request, whether the header told two lengths. The handler
// takes the note of its request (they come in order, one per request)
// through the connection the request's context carries.

// framingListener hands out connections that follow their framing.
type framingListener struct{ net.Listener }

func (l framingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &framingConn{Conn: c}, nil
}

// framingConn is a connection whose inbound requests are followed.
type framingConn struct {
	net.Conn
	mu sync.Mutex
	f  framing
}

func (c *framingConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.mu.Lock()
	c.f.feed(p[:n])
	c.mu.Unlock()
	return n, err
}

// ambiguous takes the note of the next request a handler serves on c:
// whether its header told two lengths, or whether an earlier one that no
// handler served did (a request net/http answers itself, OPTIONS *),
// which leaves every later request on c in doubt.
func (c *framingConn) ambiguous() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.f.notes) == 0 {
		return c.f.poisoned
	}
	note := c.f.notes[0]
	c.f.notes = c.f.notes[1:]
	return note
}

type connKey struct{}

// connContext puts the connection in its requests' context, where
// refuseAmbiguous finds it.
func connContext(ctx context.Context, c net.Conn) context.Context {
	if fc, ok := c.(*framingConn); ok {
		return context.WithValue(ctx, connKey{}, fc)
	}
	return ctx
}

// refuseAmbiguous answers 400 ambiguous_framing, closing the connection,
// to a request whose header told two lengths, and hands any other to
// next.
func refuseAmbiguous(next http.Handler, logger *slog.Logger) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fc, ok := r.Context().Value(connKey{}).(*framingConn)
		if !ok || !fc.ambiguous() {
			next.ServeHTTP(w, r)
			return
		}
		logger.WarnContext(r.Context(), "Refused a request with ambiguous framing",
			slog.String("method", problem.Clip(r.Method)), slog.String("path", problem.Clip(r.URL.Path)),
			slog.String("remote", r.RemoteAddr))
		// net/http closes the connection after an answer that says so,
		// without reading what follows: the body, and what a proxy
		// would have taken for the next request.
		w.Header().Set("Connection", "close")
		problem.New(http.StatusBadRequest, "ambiguous_framing",
			"The request has both Content-Length and Transfer-Encoding (or Transfer-Encoding in HTTP/1.0), so its length is ambiguous (RFC 9112, section 6.1); send one of them. The connection is closed.").Write(w)
	})
}

// The parts of a request, as framing follows them.
const (
	inRequestLine = iota // the request line, the first of the header
	inHeader             // the header's fields, up to the empty line
	inBody               // Content-Length bytes of body
	inChunkSize          // a chunk's size line
	inChunkData          // a chunk's bytes
	inChunkEnd           // the CRLF after a chunk's bytes
	inTrailer            // the trailer's fields, after the last chunk
	lost                 // no longer followed: see framing.lose
)

// Line limits, as net/http's: a chunk's size line over 4 KiB, or a
// header over http.DefaultMaxHeaderBytes (the servers here keep that
// default) and the 4 KiB net/http allows beyond it, is refused and its
// connection closed.
const (
	maxChunkLine = 4 << 10
	maxHeader    = http.DefaultMaxHeaderBytes + 4<<10
)

// framing follows the requests on one connection as net/http reads them
// (net/http's readRequest, fixLength and chunked reader), keeping for
// each a note of whether its header told two lengths.
type framing struct {
	state  int
	line   []byte // the line being read
	header int    // bytes of the header read so far

	// The request whose header is being read.
	http11    bool // HTTP/1.1 or later: Transfer-Encoding counts
	noHandler bool // OPTIONS *, which net/http answers itself
	lengths   []string
	transfers int
	transfer  string

	remain    int64 // bytes of body or of chunk left
	chunkCRLF int   // bytes of a chunk's closing CRLF read

	// notes says, for each request whose header was read and that a
	// handler has yet to serve, whether it told two lengths.
	notes []bool
	// poisoned: a request that told two lengths was answered by
	// net/http itself, and the connection kept.
	poisoned bool
}

// feed follows the bytes p, read from the connection next.
func (f *framing) feed(p []byte) {
	for len(p) > 0 && f.state != lost {
		switch f.state {
		case inBody, inChunkData:
			n := min(int64(len(p)), f.remain)
			f.remain -= n
			p = p[n:]
			if f.remain > 0 {
				continue
			}
			if f.state == inBody {
				f.state = inRequestLine
			} else {
				f.state, f.chunkCRLF = inChunkEnd, 0
			}
		case inChunkEnd:
			// Exactly CRLF, as net/http requires.
			if p[0] != "\r\n"[f.chunkCRLF] {
				f.lose()
				return
			}
			p = p[1:]
			if f.chunkCRLF++; f.chunkCRLF == 2 {
				f.state = inChunkSize
			}
		default:
			i := bytes.IndexByte(p, '\n')
			if i < 0 {
				f.keep(p)
				return
			}
			if !f.keep(p[:i+1]) {
				return
			}
			p = p[i+1:]
			f.endLine(f.line)
			f.line = f.line[:0]
			if cap(f.line) > 64<<10 {
				f.line = nil // a long line once is no reason to keep its room
			}
		}
	}
}

// keep adds b to the line being read, and reports whether framing still
// follows: not when the line, or the header, is longer than net/http
// reads.
func (f *framing) keep(b []byte) bool {
	f.line = append(f.line, b...)
	switch f.state {
	case inChunkSize:
		if len(f.line) > maxChunkLine+2 {
			f.lose()
			return false
		}
	case inRequestLine, inHeader:
		if f.header += len(b); f.header > maxHeader {
			f.lose()
			return false
		}
	case inTrailer:
		if len(f.line) > maxHeader {
			f.lose()
			return false
		}
	}
	return true
}

// endLine follows one whole line, its \n included.
func (f *framing) endLine(raw []byte) {
	if f.state == inChunkSize {
		// Ending in CRLF, with no other CR, as net/http requires.
		if !bytes.HasSuffix(raw, []byte("\r\n")) || bytes.IndexByte(raw, '\r') != len(raw)-2 {
			f.lose()
			return
		}
		size, _, _ := strings.Cut(strings.TrimRight(string(raw[:len(raw)-2]), " \t"), ";")
		n, err := strconv.ParseUint(size, 16, 63)
		if err != nil {
			f.lose()
			return
		}
		if n == 0 {
			f.state = inTrailer
			return
		}
		f.state, f.remain = inChunkData, int64(n)
		return
	}
	line := bytes.TrimSuffix(bytes.TrimSuffix(raw, []byte("\n")), []byte("\r"))
	switch f.state {
	case inRequestLine:
		// As net/http's parseRequestLine and ParseHTTPVersion read it:
		// HTTP/1.2 is served, as HTTP/1.1 is.
		method, rest, ok1 := strings.Cut(string(line), " ")
		target, proto, ok2 := strings.Cut(rest, " ")
		major, minor, ok3 := http.ParseHTTPVersion(proto)
		if !ok1 || !ok2 || !ok3 || major != 1 {
			// net/http refuses it and closes the connection.
			f.lose()
			return
		}
		f.http11 = minor >= 1
		f.noHandler = method == http.MethodOptions && target == "*"
		f.lengths, f.transfers, f.transfer = f.lengths[:0], 0, ""
		f.state = inHeader
	case inHeader:
		if len(line) > 0 {
			f.field(line)
			return
		}
		f.endHeader()
	case inTrailer:
		if len(line) == 0 {
			f.state, f.header = inRequestLine, 0
		}
	}
}

var (
	contentLength    = []byte("Content-Length")
	transferEncoding = []byte("Transfer-Encoding")
)

// field notes a header field that says how long the body is.
func (f *framing) field(line []byte) {
	if line[0] == ' ' || line[0] == '\t' {
		return // the continuation of the field before
	}
	name, value, ok := bytes.Cut(line, []byte(":"))
	if !ok {
		return // net/http refuses the request, and closes the connection
	}
	switch {
	case bytes.EqualFold(name, contentLength):
		f.lengths = append(f.lengths, string(bytes.Trim(value, " \t")))
	case bytes.EqualFold(name, transferEncoding):
		f.transfers++
		f.transfer = string(bytes.Trim(value, " \t"))
	}
}

// endHeader notes whether the header just read told two lengths, and
// follows its body as net/http reads it.
func (f *framing) endHeader() {
	ambiguous := f.transfers > 0 && (len(f.lengths) > 0 || !f.http11)
	if f.noHandler {
		// No handler takes this note: net/http answers OPTIONS * itself
		// and keeps the connection. Every later request on it is in
		// doubt.
		f.poisoned = f.poisoned || ambiguous
	} else {
		f.notes = append(f.notes, ambiguous)
	}
	switch {
	case ambiguous:
		// Answered 400 and closed: nothing after it is served.
		f.lose()
	case f.transfers > 0:
		if f.transfers > 1 || !strings.EqualFold(f.transfer, "chunked") {
			f.lose() // net/http answers 501 and closes
			return
		}
		f.state = inChunkSize
	case len(f.lengths) > 0:
		n, err := strconv.ParseUint(f.lengths[0], 10, 63)
		for _, l := range f.lengths[1:] {
			if l != f.lengths[0] {
				err = strconv.ErrSyntax
			}
		}
		if err != nil {
			f.lose() // net/http answers 400 and closes
			return
		}
		f.state, f.remain = inBody, int64(n)
		if n == 0 {
			f.state = inRequestLine
		}
	default:
		f.state = inRequestLine
	}
	f.header = 0
}

// lose stops following the connection: what comes next is either never
// served (net/http refuses the request, or the answer to an ambiguous
// one closes the connection) or is a request framing cannot read the way
// net/http does. Requests on a lost connection take no note, and pass
// unless one before them poisoned it.
func (f *framing) lose() {
	f.state = lost
	f.line = nil
}
