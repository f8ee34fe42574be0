// Command testapp is the workload of kobe's node tests, built static and
// packed into an image on the machine (make image-testapp), so nothing is
// pulled. With no arguments it serves HTTP on :8080 and answers every
// request with its hostname (the pod's name). Its subcommands are what a
// test runs in a pod with kubectl exec, since the image has no shell:
//
//	testapp get URL      print the body of URL (3 s), exit 1 on failure
//	testapp dial ADDR    open a TCP connection to host:port (3 s), exit 1 on failure
//	testapp read PATH    print the file at PATH, exit 1 on failure
//	testapp configmap NAME KEY=VALUE...
//	                     create ConfigMap NAME in namespace default of the
//	                     cluster $KUBECONFIG names (a bootstrap Job's work)
//	testapp fail MESSAGE print MESSAGE and exit 1 (a failing bootstrap Job)
//	testapp webhook CERT KEY
//	                     serve a validating admission webhook on :8443 (HTTPS
//	                     with CERT and KEY) that refuses objects named deny-*
//	testapp redirect CERT KEY URL
//	                     serve HTTPS on :8443 (CERT and KEY) answering every
//	                     request with a 307 to URL
//	testapp spawn MAX SECONDS
//	                     start `testapp hold SECONDS` processes until a start
//	                     fails (exit 0) or MAX run (exit 1)
//	testapp eat MAX      allocate and touch memory, 64 MiB at a time, up to
//	                     MAX MiB (exit 1 when nothing stopped it)
//	testapp fill PATH MAX
//	                     write PATH, 64 MiB at a time, up to MAX MiB, until a
//	                     write fails (exit 0) or MAX MiB are written (exit 1)
//	testapp inotify MAX SECONDS
//	                     take inotify instances (in `testapp inotify-hold`
//	                     children) until MAX are held (exit 0) or the machine
//	                     refuses one (exit 1); the children hold them SECONDS
//	testapp registry ADDR
//	                     serve an in-memory image registry over HTTP on ADDR
//	testapp spoof SRC[,SRC...] HOST:PORT
//	                     send 3 UDP datagrams to HOST:PORT from each forged
//	                     IPv4 source SRC over a raw socket (needs NET_RAW),
//	                     exit 0 once sent, 1 if the socket cannot be opened
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"time"
)

const timeout = 3 * time.Second

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "testapp:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	if len(args) == 0 {
		return serve()
	}
	switch {
	case args[0] == "spawn" && len(args) == 3:
		return spawn(args[1], args[2])
	case args[0] == "hold" && len(args) == 2:
		return hold(args[1])
	case args[0] == "eat" && len(args) == 2:
		return eat(args[1])
	case args[0] == "fill" && len(args) == 3:
		return fill(args[1], args[2])
	case args[0] == "registry" && len(args) == 2:
		return registry(args[1])
	case args[0] == "inotify" && len(args) == 3:
		return inotify(args[1], args[2])
	case args[0] == "inotify-hold" && len(args) == 3:
		return inotifyHold(args[1], args[2])
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	switch {
	case args[0] == "configmap" && len(args) >= 2:
		return createConfigMap(ctx, args[1], args[2:])
	case args[0] == "fail" && len(args) == 2:
		return errors.New(args[1])
	case args[0] == "write" && len(args) == 3:
		return os.WriteFile(args[1], []byte(args[2]), 0o644)
	case args[0] == "webhook" && len(args) == 3:
		return webhook(args[1], args[2])
	case args[0] == "redirect" && len(args) == 4:
		return redirect(args[1], args[2], args[3])
	case args[0] == "spoof" && len(args) == 3:
		return spoof(args[1], args[2])
	case args[0] == "spoof":
		return errSpoofUsage
	case len(args) != 2:
		return fmt.Errorf("usage: testapp [get URL | dial HOST:PORT | read PATH | write PATH CONTENT | configmap NAME KEY=VALUE... | fail MESSAGE | webhook CERT KEY | redirect CERT KEY URL | spawn MAX SECONDS | hold SECONDS | eat MAX | fill PATH MAX | inotify MAX SECONDS | registry ADDR | spoof SRC[,SRC...] HOST:PORT]")
	}
	switch args[0] {
	case "get":
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, args[1], nil)
		if err != nil {
			return err
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		defer func() { _ = resp.Body.Close() }()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("GET %s: %s", args[1], resp.Status)
		}
		_, err = io.Copy(os.Stdout, resp.Body)
		return err
	case "dial":
		var d net.Dialer
		c, err := d.DialContext(ctx, "tcp", args[1])
		if err != nil {
			return err
		}
		fmt.Println("connected to", args[1])
		return c.Close()
	case "read":
		b, err := os.ReadFile(args[1])
		if err != nil {
			return err
		}
		_, err = os.Stdout.Write(b)
		return err
	}
	return fmt.Errorf("unknown subcommand %q", args[0])
}

func serve() error {
	name, err := os.Hostname()
	if err != nil {
		return err
	}
	srv := &http.Server{
		Addr:              ":8080",
		ReadHeaderTimeout: 5 * time.Second,
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			fmt.Printf("testapp: %s %s from %s\n", r.Method, r.URL.Path, r.RemoteAddr)
			fmt.Fprintln(w, name)
		}),
	}
	fmt.Println("testapp: serving on :8080 as", name)
	return srv.ListenAndServe()
}
