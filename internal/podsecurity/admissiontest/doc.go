// Package admissiontest runs podsecurity's admission configuration in a real
// kube-apiserver (one for the whole package) and attacks it as a lease holder
// would: system:masters trying every way to lower a namespace's Pod Security
// level, then pods that own the node in a namespace whose labels were lowered
// behind the API's back, then PersistentVolumes that name the node's files,
// then network volumes in pods and PersistentVolumes (refused there, admitted
// by a second API server whose pool allows them). It holds tests only.
package admissiontest
