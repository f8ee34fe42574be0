// Package accesspolicy reconciles AccessPolicies: it reports in the Ready
// condition whether a policy can authenticate anyone (its token Secret
// exists, its OIDC issuer answers discovery, its fields make sense).
// Authentication itself lives in package auth; nothing here ever reads a
// token value into a condition, event or log.
package accesspolicy
