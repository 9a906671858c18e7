package proxy

import (
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"unicode/utf8"
)

// readBody reads at most MaxBodyBytes.
func (p *Proxy) readBody(w http.ResponseWriter, r *http.Request) ([]byte, *apiError) {
	if r.ContentLength > p.cfg.MaxBodyBytes {
		return nil, &apiError{Status: http.StatusRequestEntityTooLarge, Message: "request body of " + strconv.FormatInt(r.ContentLength, 10) + " bytes exceeds the limit of " + strconv.FormatInt(p.cfg.MaxBodyBytes, 10), Code: "request_too_large"}
	}
	n := r.ContentLength
	if n < 0 || n > 1<<20 {
		n = 4096
	}
	buf := make([]byte, 0, n+1)
	lr := io.LimitReader(r.Body, p.cfg.MaxBodyBytes+1)
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		k, err := lr.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+k]
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, bodyReadError(err, p.cfg.MaxBodyBytes)
		}
	}
	if int64(len(buf)) > p.cfg.MaxBodyBytes {
		return nil, &apiError{Status: http.StatusRequestEntityTooLarge, Message: "request body exceeds the limit of " + strconv.FormatInt(p.cfg.MaxBodyBytes, 10) + " bytes", Code: "request_too_large"}
	}
	// The body is recorded in the call's event: text that is not UTF-8 is
	// refused here rather than stored and served back unparseable.
	if !utf8.Valid(buf) {
		return nil, badRequest("", "request body is not valid UTF-8 (at byte %d)", invalidUTF8At(buf))
	}
	return buf, nil
}

// invalidUTF8At returns the offset of the first byte of b that is not
// part of valid UTF-8.
func invalidUTF8At(b []byte) int {
	for i := 0; i < len(b); {
		r, n := utf8.DecodeRune(b[i:])
		if r == utf8.RuneError && n == 1 {
			return i
		}
		i += n
	}
	return len(b)
}

// bodyReadError answers a failed body read: 413 past the gateway's body
// limit (an oversized chunked body), 408 when the body did not arrive
// before the read deadline, else 400.
func bodyReadError(err error, limit int64) *apiError {
	var mb *http.MaxBytesError
	if errors.As(err, &mb) {
		return &apiError{Status: http.StatusRequestEntityTooLarge, Message: "request body exceeds the limit of " + strconv.FormatInt(min(limit, mb.Limit), 10) + " bytes", Code: "request_too_large"}
	}
	var ne net.Error
	if errors.Is(err, os.ErrDeadlineExceeded) || errors.As(err, &ne) && ne.Timeout() {
		return &apiError{Status: http.StatusRequestTimeout, Message: "request body did not arrive in time", Code: "request_timeout"}
	}
	return &apiError{Status: http.StatusBadRequest, Message: "read body: " + err.Error()}
}
