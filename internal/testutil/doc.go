// Package testutil is what the tests of every package share: one way to
// wait for a condition (WaitFor), one way to run a daemon for a test and
// stop it when the test ends (Serve), and the scripted connection the fuzz
// targets feed a whole session through (ScriptConn), and distinct free
// addresses for daemons that must know each other's first (FreeAddrs).
//
// It is imported by tests only. It never imports a daemon package, so the
// daemons' own tests can use it.
package testutil
