// Package sim is the simulated backend: members that hold no processes, that
// become Ready spec.backend.sim.readyAfter after their ClusterInstance was
// created (or fail, for failurePercent of them, picked by UID), and that get
// real access material whose endpoint answers nothing. It exists for
// benchmarks, scale tests and demos of pool behaviour, is wired only by the
// operator's --enable-sim-backend flag, and must never serve real leases.
//
// Everything it reports is derived from the Member (UID, spec, creation
// time) and the clock, so a restarted operator or another replica gives the
// same verdict. It must not import controllers or the HTTP API.
package sim
