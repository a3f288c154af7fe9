//go:build linux

package main

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestProcessLibraryLogsRedacted runs the gateway as a process in front
// of an upstream that, after each answer, writes more bytes on the idle
// connection, quoting the key it was sent. Go's HTTP transport logs such
// bytes through the standard log package, as net/http and go-redis log
// their own troubles; those lines go through the gateway's redacting
// logger as every other line, so the key is not in the log.
func TestProcessLibraryLogsRedacted(t *testing.T) {
	const key = "gsk_Stdlog7Qp2Wm9Zx4Lc8Vb"
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	t.Cleanup(func() { ln.Close(); <-done })
	go func() {
		defer close(done)
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			// One request a connection: answer it, then the unsolicited
			// bytes, then hold the connection until the transport, having
			// read and logged them, closes it.
			_ = conn.SetDeadline(time.Now().Add(wait))
			req, err := http.ReadRequest(bufio.NewReader(conn))
			if err == nil {
				body := `{"object":"list","data":[]}`
				_, _ = io.WriteString(conn, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: "+
					strconv.Itoa(len(body))+"\r\n\r\n"+body+"HTTP/1.1 401 Unauthorized\r\nX-Key: "+req.Header.Get("Authorization")+"\r\n\r\n")
				_, _ = io.Copy(io.Discard, conn)
			}
			conn.Close()
		}
	}()
	c := startProcess(t, map[string]string{"OPENAI_BASE_URL": "http://" + ln.Addr().String() + "/v1", "OPENAI_API_KEY": key, "PROVIDERS": "openai"})
	resp, err := http.Get("http://" + c.addr + "/v1/models/gpt-x")
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	deadline := time.Now().Add(wait)
	for !strings.Contains(c.log(), "Unsolicited response") {
		if time.Now().After(deadline) {
			t.Fatalf("the transport logged no unsolicited response within %v; the log:\n%s", wait, c.log())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if log := c.log(); strings.Contains(log, "Stdlog7Qp2Wm9Zx4Lc8Vb") {
		t.Errorf("the key reached the log:\n%s", log)
	}
}
