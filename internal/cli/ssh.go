package cli

import (
	"errors"

	"github.com/kunobi-ninja/kobe/internal/apiclient"
)

// sshCredentials signs requests with a key of the SSH agent at socket.
func sshCredentials(socket, keyFilter string) (string, apiclient.Credentials, error) {
	return "", nil, errors.New("--auth ssh: signing with the SSH agent is not available in this build yet; use a token meanwhile")
}
