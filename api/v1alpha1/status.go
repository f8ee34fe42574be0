package v1alpha1

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

// Every kind's status carries observedGeneration and conditions. These
// accessors let the shared reconciler helpers (internal/controller/patch and
// internal/controller/conditions) reach them without knowing the kind.

// StatusConditions returns a pointer to the pool's status.conditions.
func (p *ClusterPool) StatusConditions() *[]metav1.Condition { return &p.Status.Conditions }

// SetObservedGeneration sets the pool's status.observedGeneration.
func (p *ClusterPool) SetObservedGeneration(g int64) { p.Status.ObservedGeneration = g }

// StatusConditions returns a pointer to the instance's status.conditions.
func (i *ClusterInstance) StatusConditions() *[]metav1.Condition { return &i.Status.Conditions }

// SetObservedGeneration sets the instance's status.observedGeneration.
func (i *ClusterInstance) SetObservedGeneration(g int64) { i.Status.ObservedGeneration = g }

// StatusConditions returns a pointer to the lease's status.conditions.
func (l *ClusterLease) StatusConditions() *[]metav1.Condition { return &l.Status.Conditions }

// SetObservedGeneration sets the lease's status.observedGeneration.
func (l *ClusterLease) SetObservedGeneration(g int64) { l.Status.ObservedGeneration = g }

// StatusConditions returns a pointer to the policy's status.conditions.
func (a *AccessPolicy) StatusConditions() *[]metav1.Condition { return &a.Status.Conditions }

// SetObservedGeneration sets the policy's status.observedGeneration.
func (a *AccessPolicy) SetObservedGeneration(g int64) { a.Status.ObservedGeneration = g }

// StatusConditions returns a pointer to the bundle's status.conditions.
func (b *BootstrapConfig) StatusConditions() *[]metav1.Condition { return &b.Status.Conditions }

// SetObservedGeneration sets the bundle's status.observedGeneration.
func (b *BootstrapConfig) SetObservedGeneration(g int64) { b.Status.ObservedGeneration = g }
