package cli

import (
	"github.com/kunobi-ninja/kobe/internal/apiclient"
)

// sshCredentials signs requests with a key of the SSH agent at socket
// ($SSH_AUTH_SOCK), chosen by keyFilter (--ssh-key).
func sshCredentials(socket, keyFilter string) (string, apiclient.Credentials, error) {
	return AuthSSH, apiclient.SSHAgent{Socket: socket, KeyFilter: keyFilter}, nil
}
