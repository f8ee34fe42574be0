package contract

import (
	"encoding/json"
	"fmt"
)

// kind is a JSON value's type as the contract states it.
type kind string

const (
	str     kind = "string"
	num     kind = "number"
	obj     kind = "object"
	arr     kind = "array"
	strNull kind = "string or null"
)

// The fields every object of a shape has (required) and those it may have
// (optional), with their JSON types.
var (
	leaseRequired = map[string]kind{
		"id": str, "phase": str, "pool": str, "profile": str, "cluster_name": str,
		"queue_position": num, "effective_ttl": str, "expires_at": strNull,
		"extensions": num, "max_extensions": num,
	}
	leaseOptional = map[string]kind{
		"alias": str, "kubeconfig": str, "requester": str, "created_at": str, "bound_at": str, "reason": str,
	}
	poolRequired = map[string]kind{
		"name": str, "phase": str, "ready": num, "leased": num, "creating": num, "recycling": num,
		"unhealthy": num, "quarantined": num, "queueDepth": num, "policy": obj,
	}
	policyRequired = map[string]kind{"mode": str, "warmTarget": num}
	policyOptional = map[string]kind{"ttl": str, "maxClusters": num, "scaleDownAfter": str, "queueTimeout": str}
	statusRequired = map[string]kind{"version": str, "auth": obj}
	statusOptional = map[string]kind{"pools": arr}
	extendRequired = map[string]kind{"expires_at": str, "extensions": num, "max_extensions": num}
	extendOptional = map[string]kind{"kubeconfig": str}
)

// checkShape checks a successful answer's body against shape.
func checkShape(shape Shape, r response) error {
	if shape == ShapeNone {
		if len(r.body) != 0 {
			return fmt.Errorf("want an empty body: %s", r)
		}
		return nil
	}
	var v any
	if err := json.Unmarshal(r.body, &v); err != nil {
		return fmt.Errorf("answer is not JSON: %w: %s", err, r)
	}
	var err error
	switch shape {
	case ShapeLease:
		err = checkObject(v, "lease", checkLease)
	case ShapeLeases:
		err = checkArray(v, "lease", checkLease)
	case ShapePool:
		err = checkObject(v, "pool", checkPool)
	case ShapePools:
		err = checkArray(v, "pool", checkPool)
	case ShapeStatus:
		err = checkObject(v, "status", checkStatus)
	case ShapeExtend:
		err = checkObject(v, "extend answer", func(m map[string]any) error {
			return fields(m, "extend answer", extendRequired, extendOptional)
		})
	default:
		err = fmt.Errorf("unknown shape %q", shape)
	}
	if err != nil {
		return fmt.Errorf("%w: %s", err, r)
	}
	return nil
}

func checkLease(m map[string]any) error { return fields(m, "lease", leaseRequired, leaseOptional) }

func checkPool(m map[string]any) error {
	if err := fields(m, "pool", poolRequired, nil); err != nil {
		return err
	}
	return fields(m["policy"].(map[string]any), "pool policy", policyRequired, policyOptional)
}

func checkStatus(m map[string]any) error {
	if err := fields(m, "status", statusRequired, statusOptional); err != nil {
		return err
	}
	if err := fields(m["auth"].(map[string]any), "status auth", map[string]kind{"methods": arr}, nil); err != nil {
		return err
	}
	if pools, ok := m["pools"]; ok {
		return checkArray(pools, "pool", checkPool)
	}
	return nil
}

func checkObject(v any, what string, check func(map[string]any) error) error {
	m, ok := v.(map[string]any)
	if !ok {
		return fmt.Errorf("want a %s object, got %T", what, v)
	}
	return check(m)
}

func checkArray(v any, what string, check func(map[string]any) error) error {
	a, ok := v.([]any)
	if !ok {
		return fmt.Errorf("want an array of %s objects, got %T (an empty list is [], not null)", what, v)
	}
	for i, e := range a {
		if err := checkObject(e, what, check); err != nil {
			return fmt.Errorf("element %d: %w", i, err)
		}
	}
	return nil
}

// object decodes a JSON object.
func object(b []byte) (map[string]any, error) {
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil || m == nil {
		return nil, fmt.Errorf("not a JSON object")
	}
	return m, nil
}

// fields checks that m has every required field and that required and
// optional fields have their JSON type.
func fields(m map[string]any, what string, required, optional map[string]kind) error {
	for name, k := range required {
		v, ok := m[name]
		if !ok {
			return fmt.Errorf("%s lacks field %q", what, name)
		}
		if !is(v, k) {
			return fmt.Errorf("%s field %q is %T, want %s", what, name, v, k)
		}
	}
	for name, k := range optional {
		if v, ok := m[name]; ok && !is(v, k) {
			return fmt.Errorf("%s field %q is %T, want %s", what, name, v, k)
		}
	}
	return nil
}

func is(v any, k kind) bool {
	switch k {
	case str:
		_, ok := v.(string)
		return ok
	case num:
		_, ok := v.(float64)
		return ok
	case obj:
		_, ok := v.(map[string]any)
		return ok
	case arr:
		_, ok := v.([]any)
		return ok
	case strNull:
		_, ok := v.(string)
		return ok || v == nil
	}
	return false
}
