// An S3 server for benchmarks/bench_bucket.py: gofakes3's in-memory store, over HTTP.
//
// moto's server, which the tests use for s3://, spends about 2.7 ms of its core on each GET and
// answers every request with "Connection: close": on this project's 2-core machine it, not the
// build, set the speed of an s3:// build. This one keeps connections alive and costs a small
// part of that, so that the benchmark measures the build.
//
//	go build -o s3server . && ./s3server -port 9000
package main

import (
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"

	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"
)

func main() {
	host := flag.String("host", "127.0.0.1", "address to listen on")
	port := flag.Int("port", 0, "port to listen on (0: any free one)")
	flag.Parse()
	listener, err := net.Listen("tcp", fmt.Sprintf("%s:%d", *host, *port))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Println("listening on", listener.Addr().String())
	faker := gofakes3.New(s3mem.New())
	if err := http.Serve(listener, faker.Server()); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
