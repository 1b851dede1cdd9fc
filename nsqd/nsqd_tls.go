package nsqd

import (
	"errors"
	"fmt"
)

// setupTLS applies NSQ's rules: a client-auth policy forces TLS required,
// and TLS cannot be required without a certificate.
func (n *NSQD) setupTLS() error {
	o := n.opts
	if o.TLSClientAuthPolicy != "" && o.TLSRequired == TLSNotRequired {
		o.TLSRequired = TLSRequired
	}
	var err error
	if n.tlsConfig, err = buildTLSConfig(o); err != nil {
		return fmt.Errorf("failed to build TLS config - %w", err)
	}
	if n.tlsConfig == nil && o.TLSRequired != TLSNotRequired {
		return errors.New("cannot require TLS client connections without TLS key and cert")
	}
	if n.clientTLSConfig, err = buildClientTLSConfig(o); err != nil {
		return fmt.Errorf("failed to build client TLS config: %w", err)
	}
	return nil
}
