package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"

	"sigs.k8s.io/yaml"
)

// kubeconfig is the part of a kubeconfig file createConfigMap uses: the
// first cluster and user, with embedded certificates (what kobe writes).
type kubeconfig struct {
	Clusters []struct {
		Cluster struct {
			Server                   string `json:"server"`
			CertificateAuthorityData []byte `json:"certificate-authority-data"`
		} `json:"cluster"`
	} `json:"clusters"`
	Users []struct {
		User struct {
			ClientCertificateData []byte `json:"client-certificate-data"`
			ClientKeyData         []byte `json:"client-key-data"`
		} `json:"user"`
	} `json:"users"`
}

// createConfigMap creates ConfigMap name in namespace default of the
// cluster $KUBECONFIG names, with data from KEY=VALUE arguments: the node
// tests' bootstrap Job, which must prove it ran against the member with
// the kubeconfig kobe mounted.
func createConfigMap(ctx context.Context, name string, pairs []string) error {
	path := os.Getenv("KUBECONFIG")
	if path == "" {
		return errors.New("KUBECONFIG is not set")
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var kc kubeconfig
	if err := yaml.Unmarshal(raw, &kc); err != nil {
		return fmt.Errorf("parsing %s: %w", path, err)
	}
	if len(kc.Clusters) == 0 || len(kc.Users) == 0 {
		return fmt.Errorf("%s names no cluster or no user", path)
	}
	cert, err := tls.X509KeyPair(kc.Users[0].User.ClientCertificateData, kc.Users[0].User.ClientKeyData)
	if err != nil {
		return fmt.Errorf("the client certificate of %s: %w", path, err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(kc.Clusters[0].Cluster.CertificateAuthorityData) {
		return fmt.Errorf("%s has no certificate authority", path)
	}
	data := map[string]string{}
	for _, p := range pairs {
		k, v, ok := strings.Cut(p, "=")
		if !ok {
			return fmt.Errorf("%q is not KEY=VALUE", p)
		}
		data[k] = v
	}
	body, err := json.Marshal(map[string]any{
		"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]string{"name": name}, "data": data,
	})
	if err != nil {
		return err
	}
	url := strings.TrimSuffix(kc.Clusters[0].Cluster.Server, "/") + "/api/v1/namespaces/default/configmaps"
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{
		RootCAs: roots, Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12,
	}}}
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	out, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode != http.StatusCreated {
		return fmt.Errorf("creating ConfigMap %s: %s: %s", name, resp.Status, out)
	}
	fmt.Printf("created ConfigMap %s with %d keys\n", name, len(data))
	return nil
}
