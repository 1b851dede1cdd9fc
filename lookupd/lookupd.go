// Package lookupd is nsqlookupd as a library: the registration DB, the TCP
// protocol V1 that nsqd registers over, and the HTTP discovery API.
package lookupd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sync"

	"github.com/nsqgo/nsq/internal/httpapi"
	"github.com/nsqgo/nsq/internal/netx"
	"github.com/nsqgo/nsq/internal/version"
)

// LOOKUPD is one nsqlookupd instance. New binds its listeners, Start serves
// them, Shutdown stops it.
type LOOKUPD struct {
	opts   Options // a copy, read-only after New
	logger *slog.Logger
	db     *RegistrationDB

	tcpListener  net.Listener
	httpListener net.Listener
	httpServer   *http.Server
	tcp          *tcpServer

	// errc carries the first error that stopped a listener for good, so a
	// main can exit instead of running half a daemon.
	errc chan error

	mu       sync.Mutex // guards started and shutdown
	started  bool
	shutdown bool

	wg sync.WaitGroup // accept loop, HTTP server, one per TCP connection
}

// New validates opts and binds both listeners, so that an address with port
// 0 can be read back from TCPAddr and HTTPAddr before Start.
func New(opts *Options) (*LOOKUPD, error) {
	if err := opts.validate(); err != nil {
		return nil, fmt.Errorf("nsqlookupd options: %w", err)
	}
	logger, err := opts.logger()
	if err != nil {
		return nil, fmt.Errorf("nsqlookupd options: %w", err)
	}
	hostname, err := os.Hostname()
	if err != nil {
		return nil, fmt.Errorf("nsqlookupd: hostname: %w", err)
	}
	l := &LOOKUPD{
		opts:   *opts,
		logger: logger,
		db:     NewRegistrationDB(),
		errc:   make(chan error, 1),
	}
	l.opts.Logger = logger
	if l.tcpListener, err = netx.Listen(opts.TCPAddress); err != nil {
		return nil, fmt.Errorf("failed to instantiate nsqlookupd - listen (%s) failed - %w", opts.TCPAddress, err)
	}
	if l.httpListener, err = netx.Listen(opts.HTTPAddress); err != nil {
		_ = l.tcpListener.Close()
		return nil, fmt.Errorf("failed to instantiate nsqlookupd - listen (%s) failed - %w", opts.HTTPAddress, err)
	}
	reply, err := json.Marshal(identifyReply{
		BroadcastAddress: opts.BroadcastAddress,
		Hostname:         hostname,
		HTTPPort:         netx.Port(l.httpListener),
		TCPPort:          netx.Port(l.tcpListener),
		Version:          version.Version,
	})
	if err != nil {
		l.closeListeners()
		return nil, fmt.Errorf("nsqlookupd: encode IDENTIFY reply: %w", err)
	}
	l.tcp = newTCPServer(&protocolV1{
		db:            l.db,
		logger:        logger,
		identifyReply: reply,
		idleTimeout:   max(opts.InactiveProducerTimeout, minIdleTimeout),
	}, logger)
	l.httpServer = httpapi.NewServer(newHTTPHandler(l.db, &l.opts, logger), logger)
	return l, nil
}

// identifyReply is lookupd's answer to IDENTIFY; fields are in alphabetical
// order so the bytes match NSQ's, which encodes a map.
type identifyReply struct {
	BroadcastAddress string `json:"broadcast_address"`
	Hostname         string `json:"hostname"`
	HTTPPort         int    `json:"http_port"`
	TCPPort          int    `json:"tcp_port"`
	Version          string `json:"version"`
}

// TCPAddr returns the bound address of the TCP listener.
func (l *LOOKUPD) TCPAddr() net.Addr { return l.tcpListener.Addr() }

// HTTPAddr returns the bound address of the HTTP listener.
func (l *LOOKUPD) HTTPAddr() net.Addr { return l.httpListener.Addr() }

// DB returns the registration DB (for embedding and tests).
func (l *LOOKUPD) DB() *RegistrationDB { return l.db }

// Logger returns the logger in use.
func (l *LOOKUPD) Logger() *slog.Logger { return l.logger }

// Err returns a channel that receives the error that stopped a listener for
// good. It is never closed; nothing is sent on a clean Shutdown.
func (l *LOOKUPD) Err() <-chan error { return l.errc }

// Start serves both listeners in goroutines and returns at once.
func (l *LOOKUPD) Start() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.shutdown {
		return errors.New("nsqlookupd: Start after Shutdown")
	}
	if l.started {
		return errors.New("nsqlookupd: already started")
	}
	l.started = true
	l.logger.Info(version.String("nsqlookupd"))
	l.logger.Info("TCP: listening on " + l.tcpListener.Addr().String())
	l.logger.Info("HTTP: listening on " + l.httpListener.Addr().String())
	l.wg.Add(2)
	go func() {
		defer l.wg.Done()
		l.tcp.serve(l.tcpListener, &l.wg)
	}()
	go func() {
		defer l.wg.Done()
		if err := httpapi.Serve(l.httpServer, l.httpListener); err != nil {
			l.fail(fmt.Errorf("nsqlookupd: HTTP server: %w", err))
		}
	}()
	return nil
}

// fail reports a fatal serving error once.
func (l *LOOKUPD) fail(err error) {
	l.logger.Error(err.Error())
	select {
	case l.errc <- err:
	default:
	}
}

// Shutdown stops accepting, lets in-flight HTTP requests finish, closes every
// nsqd connection (dropping its registrations) and waits for all goroutines,
// or until ctx is done. It may be called more than once.
func (l *LOOKUPD) Shutdown(ctx context.Context) error {
	l.mu.Lock()
	first := !l.shutdown
	l.shutdown = true
	started := l.started
	l.mu.Unlock()

	var errs []error
	if first {
		l.tcp.beginClose()
		if err := l.tcpListener.Close(); err != nil && !errors.Is(err, net.ErrClosed) {
			errs = append(errs, fmt.Errorf("close TCP listener: %w", err))
		}
		l.logger.Info("TCP: closing " + l.tcpListener.Addr().String())
		l.tcp.closeConns()
		if started {
			if err := l.httpServer.Shutdown(ctx); err != nil {
				errs = append(errs, fmt.Errorf("HTTP shutdown: %w", err))
			}
			l.logger.Info("HTTP: closing " + l.httpListener.Addr().String())
		} else if err := l.httpListener.Close(); err != nil {
			errs = append(errs, fmt.Errorf("close HTTP listener: %w", err))
		}
	}
	done := make(chan struct{})
	go func() {
		l.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-ctx.Done():
		errs = append(errs, fmt.Errorf("nsqlookupd: waiting for goroutines: %w", ctx.Err()))
	}
	return errors.Join(errs...)
}

func (l *LOOKUPD) closeListeners() {
	_ = l.tcpListener.Close()
	_ = l.httpListener.Close()
}
