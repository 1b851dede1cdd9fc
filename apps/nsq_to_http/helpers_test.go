package main

import (
	"github.com/nsqgo/nsq/apps/internal/daemontest"
)

// The daemons come from apps/internal/daemontest, shared by every tool.
var (
	startNSQD = daemontest.StartNSQD
)
