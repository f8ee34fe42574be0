// Package accesstest gives in-process tests the Sealer an operator would
// load from its key Secret, and seals fixtures' access material with it.
package accesstest

import (
	"bytes"
	"context"
	"testing"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/backend"
	"github.com/kunobi-ninja/kobe/internal/credentials/memberaccess"
)

// Sealer is a Sealer with a fixed key: every component a test wires with it
// opens what the others sealed, as an operator's replicas do with the key
// they share.
func Sealer() *memberaccess.Sealer {
	s, err := memberaccess.NewSealer(bytes.Repeat([]byte{0x6b}, memberaccess.KeySize))
	if err != nil {
		panic(err) // a fixed key of the right size
	}
	return s
}

// Publish seals a into inst's status with Sealer(); inst must have its UID
// (created), and the caller writes its status.
func Publish(t testing.TB, inst *kobev1.ClusterInstance, a *backend.Access) {
	t.Helper()
	if err := Sealer().Publish(inst, a); err != nil {
		t.Fatalf("sealing the access of %s: %v", inst.Name, err)
	}
}

// FromOperator opens the access material of member, as a running operator
// sealed it: with the key in the operator's Secret of namespace, from a
// live read of the member.
func FromOperator(t testing.TB, c client.Reader, namespace, member string) *backend.Access {
	t.Helper()
	s, err := memberaccess.LoadKey(context.Background(), c, namespace)
	if err != nil {
		t.Fatalf("loading the operator's member access key: %v", err)
	}
	inst := &kobev1.ClusterInstance{}
	if err := c.Get(context.Background(), types.NamespacedName{Namespace: namespace, Name: member}, inst); err != nil {
		t.Fatalf("reading member %s: %v", member, err)
	}
	a, err := s.Full(inst)
	if err != nil {
		t.Fatalf("opening the access material of %s: %v", member, err)
	}
	return a
}
