// Command s3server serves the S3 API from memory on the loopback, for the object storage benchmark.
//
// It is gofakes3 (github.com/johannesboyne/gofakes3, in-memory backend, conditional puts checked under
// the backend's lock) behind one adapter: a body sent in aws-chunked encoding (the AWS C++ SDK's, hence
// pyarrow's, with a trailing checksum) is decoded and sent on with its Content-Length, which gofakes3
// requires. moto_server, the suite's S3 server, spends about 2 ms of CPU a request in Python; this one
// a small fraction of that, so on a machine of two cores the benchmark measures the store, not the server.
//
//	go build -o s3server . && ./s3server -addr 127.0.0.1:0    # prints the endpoint it listens on
package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"

	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:0", "address to listen on (port 0: a free one)")
	flag.Parse()
	listener, err := net.Listen("tcp", *addr)
	if err != nil {
		log.Fatal(err)
	}
	server := gofakes3.New(s3mem.New(), gofakes3.WithAutoBucket(true)).Server()
	fmt.Printf("http://%s\n", listener.Addr())
	os.Stdout.Sync()
	log.Fatal(http.Serve(listener, withLengths(server)))
}

// withLengths hands next every PUT and POST with its whole body and its length: aws-chunked bodies decoded.
func withLengths(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPut || r.Method == http.MethodPost {
			body, err := io.ReadAll(r.Body)
			if err == nil && strings.HasPrefix(r.Header.Get("X-Amz-Content-Sha256"), "STREAMING-") {
				body, err = unchunk(body)
				r.Header.Set("X-Amz-Content-Sha256", "UNSIGNED-PAYLOAD")
				for _, h := range []string{"X-Amz-Decoded-Content-Length", "X-Amz-Trailer", "Content-Encoding"} {
					r.Header.Del(h)
				}
			}
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			r.Body = io.NopCloser(bytes.NewReader(body))
			r.ContentLength = int64(len(body))
			r.Header.Set("Content-Length", strconv.Itoa(len(body)))
		}
		next.ServeHTTP(w, r)
	})
}

// unchunk decodes an aws-chunked body: chunks of "<hex size>[;extensions]\r\n<data>\r\n", the last of size 0,
// then trailers (checksums), which are dropped.
func unchunk(b []byte) ([]byte, error) {
	var out []byte
	for {
		end := bytes.Index(b, []byte("\r\n"))
		if end < 0 {
			return nil, errors.New("aws-chunked body: a chunk without its size line")
		}
		size := string(b[:end])
		if i := strings.IndexByte(size, ';'); i >= 0 {
			size = size[:i]
		}
		n, err := strconv.ParseInt(strings.TrimSpace(size), 16, 64)
		if err != nil || n < 0 {
			return nil, fmt.Errorf("aws-chunked body: bad chunk size %q", size)
		}
		b = b[end+2:]
		if n == 0 {
			return out, nil
		}
		if int64(len(b)) < n+2 {
			return nil, errors.New("aws-chunked body: a chunk shorter than its size")
		}
		out = append(out, b[:n]...)
		b = b[n+2:]
	}
}
