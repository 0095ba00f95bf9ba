// Package isolation holds end-to-end tests that run hostile code inside
// real sandboxes of an in-process test backend (gVisor on the engine that
// `make setup` starts) and prove what must hold: the lockdown of a
// sandbox, that it cannot reach its neighbours, the host, private or
// link-local addresses or any credential of the platform, that resource
// abuse stays inside it, and that the backend survives its engine
// restarting underneath it. The package has no code of its own: see the
// _test.go files.
package isolation
