package cli

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/kunobi-ninja/kobe/internal/apiclient"
	"github.com/kunobi-ninja/kobe/internal/sshsig"
)

// statusTimeout bounds the GET /v1/status that reads a server's audience.
const statusTimeout = 15 * time.Second

// sshCredentials signs requests with a key of the SSH agent at socket
// ($SSH_AUTH_SOCK), chosen by keyFilter (--ssh-key). The audience to sign
// for is filled in by pinSSHAudience.
func sshCredentials(socket, keyFilter string) (string, apiclient.Credentials, error) {
	return AuthSSH, apiclient.SSHAgent{Socket: socket, KeyFilter: keyFilter}, nil
}

// pinSSHAudience makes SSH credentials sign for the audience pinned for
// the target's endpoint. It reads the audience the server publishes in GET
// /v1/status; on first use it pins it in the config file at path (in the
// context when the endpoint is the context's, else under ssh-audiences), and
// afterwards refuses an audience that differs from the pinned one: a server
// that relays signed requests to another kobe installation would announce
// that installation's audience.
func pinSSHAudience(warn io.Writer, path string, cfg *Config, t *Target, opts []apiclient.Option) error {
	agent, ok := t.Credentials.(apiclient.SSHAgent)
	if !ok {
		return nil
	}
	anonymous, err := apiclient.New(t.Endpoint, nil, opts...)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), statusTimeout)
	defer cancel()
	st, err := anonymous.Status(ctx)
	if err != nil {
		return fmt.Errorf("reading the SSH audience of %s (GET /v1/status): %w", t.Endpoint, err)
	}
	announced := st.Auth.Audience
	switch {
	case announced == "":
		return fmt.Errorf("the server at %s publishes no SSH audience in GET /v1/status: it accepts no SSH signatures, "+
			"or its kobe operator is older than this CLI; use another --auth method or upgrade the operator", t.Endpoint)
	case !sshsig.ValidAudience(announced):
		return fmt.Errorf("the server at %s publishes an SSH audience that is not 1 to %d printable ASCII bytes; it is not a kobe server this CLI can sign for",
			t.Endpoint, sshsig.MaxAudienceLen)
	}

	pin := cfg.audiencePin(t)
	switch {
	case pin.audience == "":
		pin.set(announced)
		if err := SaveConfig(path, cfg); err != nil {
			return fmt.Errorf("pinning the SSH audience of %s: %w; make %s writable, or pin it yourself with `kobe config set NAME --endpoint %s --ssh-audience %q`",
				t.Endpoint, err, path, t.Endpoint, announced)
		}
		if warn != nil {
			warnf(warn, "Pinned the SSH audience %q of %s in %s (first use); SSH signatures for this server name it from now on\n", announced, t.Endpoint, path)
		}
	case pin.audience != announced:
		return fmt.Errorf("the server at %s announces SSH audience %q, but %q was pinned for it in %s on first use; "+
			"kobe does not sign for a changed audience, because a server that forwards your requests to another kobe installation would announce exactly that. "+
			"If the operator was reinstalled or its --api-audience changed, confirm the new audience with its administrators, then %s",
			t.Endpoint, announced, pin.audience, path, pin.howToRepin(announced))
	}
	agent.Audience = announced
	t.Credentials = agent
	return nil
}

// audiencePin is where the config file pins one endpoint's audience.
type audiencePin struct {
	audience string
	// context is the context holding it; nil for the ssh-audiences list.
	context  *Context
	cfg      *Config
	endpoint string
}

// audiencePin finds the pin of t's endpoint: its context's when the
// endpoint is the context's own, else the ssh-audiences entry.
func (c *Config) audiencePin(t *Target) *audiencePin {
	endpoint := normalizeEndpoint(t.Endpoint)
	if t.ContextName != "" {
		if kctx := c.Context(t.ContextName); kctx != nil && normalizeEndpoint(kctx.Endpoint) == endpoint {
			return &audiencePin{audience: kctx.SSHAudience, context: kctx, cfg: c, endpoint: endpoint}
		}
	}
	p := &audiencePin{cfg: c, endpoint: endpoint}
	for _, a := range c.SSHAudiences {
		if normalizeEndpoint(a.Endpoint) == endpoint {
			p.audience = a.Audience
		}
	}
	return p
}

func (p *audiencePin) set(audience string) {
	if p.context != nil {
		p.context.SSHAudience = audience
		return
	}
	p.cfg.SSHAudiences = append(p.cfg.SSHAudiences, PinnedAudience{Endpoint: p.endpoint, Audience: audience})
}

func (p *audiencePin) howToRepin(announced string) string {
	if p.context != nil {
		return fmt.Sprintf("run: kobe config set %s --ssh-audience %q", p.context.Name, announced)
	}
	return fmt.Sprintf("delete the entry for %s under ssh-audiences in the config file (it is pinned again on next use)", p.endpoint)
}

// normalizeEndpoint is endpoint as ParseEndpoint writes it, so that
// "https://k.example.com/" and "https://k.example.com" share a pin.
func normalizeEndpoint(endpoint string) string {
	u, err := apiclient.ParseEndpoint(endpoint)
	if err != nil {
		return endpoint
	}
	return u.String()
}
