package main

import (
	"fmt"
	"net"
)

// bindAllInterfacesFlag is the flag that lets plain-HTTP endpoints listen
// beyond loopback.
const bindAllInterfacesFlag = "bind-all-interfaces"

// listener is one address the operator serves HTTP on, as its flag gave it.
type listener struct {
	// flag names the address flag, for messages.
	flag string
	// addr is the flag's value: empty for the default, "0" to disable
	// (where the flag allows it), else host:port.
	addr string
	// defaultPort is the port of the default address.
	defaultPort string
	// tls says the endpoint is served over HTTPS, so its traffic (bearer
	// tokens, kubeconfigs) is protected on any network.
	tls bool
	// disableWith is the value that turns the endpoint off ("" when none).
	disableWith string
}

// resolveListenAddress decides where one endpoint listens. The default is
// loopback, unless the endpoint is served over TLS or bindAll
// (--bind-all-interfaces) says the network in front of it is trusted; then
// every interface. An explicit address beyond loopback over plain HTTP is
// refused without bindAll: the API carries bearer tokens and kubeconfigs,
// metrics and pprof tell about the operator, and none of that should cross
// a network in the clear by accident.
func resolveListenAddress(l listener, bindAll bool) (string, error) {
	open := l.tls || bindAll
	switch {
	case l.addr == "" && open:
		return ":" + l.defaultPort, nil
	case l.addr == "":
		return net.JoinHostPort("127.0.0.1", l.defaultPort), nil
	case l.disableWith != "" && l.addr == l.disableWith:
		return l.addr, nil
	}
	host, _, err := net.SplitHostPort(l.addr)
	if err != nil {
		return "", fmt.Errorf("--%s %q is not host:port (e.g. 127.0.0.1:%s): %w", l.flag, l.addr, l.defaultPort, err)
	}
	if open || isLoopbackHost(host) {
		return l.addr, nil
	}
	what := "listens beyond loopback over plain HTTP"
	if host == "" {
		what = "listens on every interface over plain HTTP"
	}
	fix := fmt.Sprintf("use 127.0.0.1:%s, or pass --%s if the network in front of it is trusted (e.g. a pod network behind a NetworkPolicy)", l.defaultPort, bindAllInterfacesFlag)
	if l.flag == "api-bind-address" {
		fix = "serve the API over HTTPS (--api-tls-cert-file and --api-tls-key-file), " + fix
	}
	return "", fmt.Errorf("--%s %q %s: %s", l.flag, l.addr, what, fix)
}

// isLoopbackHost reports whether host names only this machine: a loopback
// IP or "localhost". Any other name may resolve to anything.
func isLoopbackHost(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// resolveListeners replaces the address flags' values with where each
// endpoint listens (resolveListenAddress), or names the first one refused.
func (o *options) resolveListeners() error {
	type target struct {
		l   listener
		out *string
	}
	targets := []target{
		{listener{flag: "api-bind-address", addr: o.api.BindAddress, defaultPort: "8090", tls: o.api.TLSCertFile != ""}, &o.api.BindAddress},
		{listener{flag: "metrics-bind-address", addr: o.metricsAddr, defaultPort: "8080", disableWith: "0"}, &o.metricsAddr},
		{listener{flag: "health-probe-bind-address", addr: o.probeAddr, defaultPort: "8081", disableWith: "0"}, &o.probeAddr},
	}
	if o.pprofAddr != "" { // empty disables pprof: it has no default address
		targets = append(targets, target{listener{flag: "pprof-bind-address", addr: o.pprofAddr, defaultPort: "6060"}, &o.pprofAddr})
	}
	for _, t := range targets {
		addr, err := resolveListenAddress(t.l, o.bindAllInterfaces)
		if err != nil {
			return err
		}
		*t.out = addr
	}
	return nil
}
