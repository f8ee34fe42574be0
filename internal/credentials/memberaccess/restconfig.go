package memberaccess

import (
	"fmt"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// RESTConfig is the configuration of the operator's own requests to a
// member with its admin kubeconfig: bounded by timeout, without
// client-side throttling (each step makes a handful of requests, one after
// another), and with a user agent naming the caller ("kobe-operator/<agent>")
// in the member's audit log.
func RESTConfig(adminKubeconfig []byte, timeout time.Duration, agent string) (*rest.Config, error) {
	cfg, err := clientcmd.RESTConfigFromKubeConfig(adminKubeconfig)
	if err != nil {
		return nil, fmt.Errorf("parsing the member's admin kubeconfig: %w", err)
	}
	cfg.Timeout = timeout
	cfg.QPS, cfg.Burst = -1, 0
	cfg.UserAgent = "kobe-operator/" + agent
	return cfg, nil
}
