package nsqd

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/nsqgo/nsq/internal/logging"
	"github.com/nsqgo/nsq/internal/wire"
)

// stateSet is a bitmask of client states a command is accepted in.
type stateSet uint8

const (
	inInit stateSet = 1 << iota
	inSubscribed
	inClosing
	inAny = inInit | inSubscribed | inClosing
)

func stateBit(s int32) stateSet {
	switch s {
	case stateInit:
		return inInit
	case stateSubscribed:
		return inSubscribed
	case stateClosing:
		return inClosing
	}
	return 0
}

// bodyKind says what follows a command line.
type bodyKind uint8

const (
	noBodyFollows      bodyKind = iota
	lengthPrefixedBody          // [int32 n][n bytes] (MPUB's n bytes hold its parts)
)

// authScope is what a command needs AUTH's permission for.
type authScope uint8

const (
	authNone         authScope = iota
	authTopic                  // params[1] is the topic (publishing)
	authTopicChannel           // params[1] and params[2] (SUB)
)

// commandSpec is one row of the protocol table: everything about a command
// that is checked before its handler runs, in NSQ's order: TLS, state,
// parameter count, parameter validation (check), AUTH where NSQ checks it,
// then the body read and its limits.
type commandSpec struct {
	name      string // the table key, set by init
	states    stateSet
	minParams int // not counting the command name
	paramsMsg string
	// silentIn lists states in which the command is ignored, with a line
	// in the log (RDY after CLS).
	silentIn stateSet
	check    func(c *client, params [][]byte) error
	// auth is what the command needs permission for; NSQ asks before
	// reading MPUB's body (authBeforeBody) and after PUB's and DPUB's.
	auth           authScope
	authBeforeBody bool
	body           bodyKind
	// oneMessage: the body is a single message ("message body", "message
	// too big" in errors), not a body of parts or JSON.
	oneMessage bool
	bodyCode   string                      // error code for body problems
	failCode   string                      // error code when the daemon cannot take the body now
	limit      func(l *clientLimits) int64 // max body (or message) size
	// byParts, if set, reads a body whose own contents say where it ends
	// (MPUB's parts); the declared size was only checked against limit.
	byParts func(c *client, declared int64) (src io.Reader, check bodyCheck, size int64, err error)
	// pooledBody: the body is read into the command's pubBuffers (c.mpubBufs).
	pooledBody bool
	run        func(c *client, params [][]byte, body []byte) ([]byte, error)
	// runFailCode, if set, turns an error from run that is not already a
	// protocol error into a non-fatal "<code> <CMD> <param> failed <err>"
	// (FIN, REQ, TOUCH).
	runFailCode string
}

func maxMsgSize(l *clientLimits) int64  { return l.MaxMsgSize }
func maxBodySize(l *clientLimits) int64 { return l.MaxBodySize }

// commands is the protocol V2 table (docs/protocol.md#commands).
var commands = map[string]*commandSpec{
	"IDENTIFY": {states: inInit, body: lengthPrefixedBody, bodyCode: "E_BAD_BODY", failCode: "E_IDENTIFY_FAILED", limit: maxBodySize, run: (*client).identify},
	"AUTH":     {states: inInit, check: checkAuthParams, body: lengthPrefixedBody, bodyCode: "E_BAD_BODY", failCode: "E_AUTH_FAILED", limit: maxBodySize, run: (*client).auth},
	// SUB counts its parameters in checkSUB, after the heartbeat check, as
	// NSQ does.
	"SUB":   {states: inInit, check: checkSUB, auth: authTopicChannel, run: (*client).subscribe},
	"RDY":   {states: inSubscribed, silentIn: inClosing, run: (*client).ready},
	"FIN":   {states: inSubscribed | inClosing, minParams: 1, paramsMsg: "insufficient number of params", check: checkMsgID, run: (*client).finish, runFailCode: "E_FIN_FAILED"},
	"REQ":   {states: inSubscribed | inClosing, minParams: 2, paramsMsg: "insufficient number of params", check: checkMsgID, run: (*client).requeue, runFailCode: "E_REQ_FAILED"},
	"TOUCH": {states: inSubscribed | inClosing, minParams: 1, paramsMsg: "insufficient number of params", check: checkMsgID, run: (*client).touch, runFailCode: "E_TOUCH_FAILED"},
	"CLS":   {states: inSubscribed, run: (*client).startClose},
	"NOP":   {states: inAny, run: func(*client, [][]byte, []byte) ([]byte, error) { return nil, nil }},
	"PUB": {states: inAny, minParams: 1, paramsMsg: "insufficient number of parameters", check: checkTopic, auth: authTopic,
		body: lengthPrefixedBody, oneMessage: true, bodyCode: "E_BAD_MESSAGE", failCode: "E_PUB_FAILED", limit: maxMsgSize, run: (*client).pub},
	"DPUB": {states: inAny, minParams: 2, paramsMsg: "insufficient number of parameters", check: checkDPUB, auth: authTopic,
		body: lengthPrefixedBody, oneMessage: true, bodyCode: "E_BAD_MESSAGE", failCode: "E_DPUB_FAILED", limit: maxMsgSize, run: (*client).dpub},
	"MPUB": {states: inAny, minParams: 1, paramsMsg: "insufficient number of parameters", check: checkTopic, auth: authTopic, authBeforeBody: true,
		body: lengthPrefixedBody, bodyCode: "E_BAD_BODY", failCode: "E_MPUB_FAILED", limit: maxBodySize,
		byParts: (*client).mpubSource, pooledBody: true, run: (*client).mpub},
}

func init() {
	for name, spec := range commands {
		spec.name = name
	}
}

// ioLoop reads and executes commands until the connection ends, and
// returns why it ended when that is an error (NSQ's IOLoop result): a
// fatal client error, or a failure to read a command or send a response.
func (c *client) ioLoop() error {
	err := c.readLoop()
	c.logf(slog.LevelInfo, "PROTOCOL(V2): [%s] exiting ioloop", c.remoteAddr)
	c.cleanup()
	c.logf(slog.LevelInfo, "PROTOCOL(V2): [%s] exiting messagePump", c.remoteAddr)
	return err
}

func (c *client) readLoop() error {
	var paramBuf [maxParams + 1][]byte
	for {
		c.armReadDeadline()
		line, err := c.reader.ReadSlice('\n')
		if err != nil {
			if errors.Is(err, bufio.ErrBufferFull) {
				ferr := wire.NewFatalClientErr("E_INVALID", "command line too long (limit %d bytes)", readBufferSize)
				_ = c.sendError(ferr)
				return ferr
			}
			if errors.Is(err, io.EOF) {
				return nil
			}
			return fmt.Errorf("failed to read command - %w", err)
		}
		line = bytes.TrimSuffix(line[:len(line)-1], []byte{'\r'})
		params := splitParams(line, paramBuf[:0])
		if c.d.logger().Enabled(context.Background(), slog.LevelDebug) {
			c.logf(slog.LevelDebug, "PROTOCOL(V2): [%s] %s", c.remoteAddr, params)
		}
		resp, err := c.exec(params)
		if err != nil {
			if sendErr := c.sendError(err); sendErr != nil || isFatalClientErr(err) || !isClientErr(err) {
				return err
			}
			continue
		}
		if resp != nil {
			if err := c.sendFrame(wire.FrameTypeResponse, resp); err != nil {
				return fmt.Errorf("failed to send response - %w", err)
			}
		}
	}
}

// logf logs as NSQ's nsqd does: the values in the message.
func (c *client) logf(level slog.Level, format string, args ...any) {
	logging.Logf(c.d.logger(), level, format, args...)
}

// armReadDeadline gives the client two heartbeat intervals to send its
// next command. The deadline only matters to a read syscall, so it is
// re-armed only when the next line is not already buffered: a batch of FINs
// read in one syscall costs one deadline update, not one per FIN.
func (c *client) armReadDeadline() {
	if n := c.reader.Buffered(); n > 0 {
		if buf, _ := c.reader.Peek(n); bytes.IndexByte(buf, '\n') >= 0 {
			return
		}
	}
	if c.heartbeatInterval > 0 {
		_ = c.conn.SetReadDeadline(time.Now().Add(2 * c.heartbeatInterval))
	} else {
		_ = c.conn.SetReadDeadline(time.Time{})
	}
}

// isFatalClientErr is errors.As for a *wire.FatalClientErr, in a function
// of its own so that the target escapes to the heap only when called.
func isFatalClientErr(err error) bool {
	var fatal *wire.FatalClientErr
	return errors.As(err, &fatal)
}

func isClientErr(err error) bool {
	var ce *wire.ClientErr
	return errors.As(err, &ce)
}

// splitParams splits on single spaces without allocating (two spaces give
// an empty parameter, as in NSQ).
func splitParams(line []byte, out [][]byte) [][]byte {
	for len(out) < cap(out)-1 {
		i := bytes.IndexByte(line, ' ')
		if i < 0 {
			break
		}
		out = append(out, line[:i])
		line = line[i+1:]
	}
	return append(out, line)
}

// sendError sends err to the client in an error frame, logging it first
// as NSQ logs every error it sends a client, and the send's failure.
func (c *client) sendError(err error) error {
	text := err.Error()
	if !isClientErr(err) && !isFatalClientErr(err) {
		text = "E_INVALID " + text
	}
	parent := wire.ParentContext(err)
	c.logf(slog.LevelError, "[%s] - %s%s", c.remoteAddr, text, parent)
	if sendErr := c.sendFrame(wire.FrameTypeError, []byte(text)); sendErr != nil {
		c.logf(slog.LevelError, "[%s] - %s%s", c.remoteAddr, sendErr, parent)
		return sendErr
	}
	return nil
}

// exec runs one command line through the table.
func (c *client) exec(params [][]byte) ([]byte, error) {
	name := params[0]
	if err := c.tlsRequiredErr(name); err != nil {
		return nil, err
	}
	spec, ok := commands[string(name)]
	if !ok {
		return nil, wire.NewFatalClientErr("E_INVALID", "invalid command %s", name)
	}
	state := stateBit(c.state.Load())
	if spec.silentIn&state != 0 {
		c.logf(slog.LevelInfo, "PROTOCOL(V2): [%s] ignoring %s after CLS in state ClientStateV2Closing", c.remoteAddr, name)
		return nil, nil
	}
	if spec.states&state == 0 {
		return nil, wire.NewFatalClientErr("E_INVALID", "cannot %s in current state", name)
	}
	if len(params)-1 < spec.minParams {
		return nil, wire.NewFatalClientErr("E_INVALID", "%s %s", name, spec.paramsMsg)
	}
	if spec.check != nil {
		if err := spec.check(c, params); err != nil {
			return nil, err
		}
	}
	if spec.authBeforeBody {
		if err := c.authorize(spec, params); err != nil {
			return nil, err
		}
	}
	if spec.body != noBodyFollows {
		c.detachParams(params)
	}
	var body []byte
	if spec.body == lengthPrefixedBody {
		var err error
		if body, err = c.readSizedBody(spec); err != nil {
			return nil, err
		}
	}
	if !spec.authBeforeBody {
		if err := c.authorize(spec, params); err != nil {
			return nil, err
		}
	}
	resp, err := spec.run(c, params, body)
	if err != nil && spec.runFailCode != "" && !isClientErr(err) && !isFatalClientErr(err) {
		return nil, wire.NewClientErr(spec.runFailCode, "%s %s failed %s", name, params[1], err).WithParent(err)
	}
	return resp, err
}

// authorize is AUTH's permission check for the command's scope.
func (c *client) authorize(spec *commandSpec, params [][]byte) error {
	switch spec.auth {
	case authTopic:
		return c.checkAuth(spec.name, c.pubTopic(params[1]), "")
	case authTopicChannel:
		return c.checkAuth(spec.name, string(params[1]), string(params[2]))
	}
	return nil
}

// detachParams copies the parameters out of the read buffer, which the
// body read that follows refills (overwriting the command line) whenever the
// body was not already buffered. Validated names are short, so they fit
// the connection's small scratch array; anything longer is cloned.
func (c *client) detachParams(params [][]byte) {
	buf := c.paramBuf[:0]
	for i, p := range params {
		if len(buf)+len(p) > cap(buf) {
			params[i] = bytes.Clone(p)
			continue
		}
		start := len(buf)
		buf = append(buf, p...)
		params[i] = buf[start:len(buf):len(buf)]
	}
}

// readSizedBody reads [int32 n][n bytes] with 1 <= n <= the command's
// limit into a buffer of exactly n bytes (it may become a message body,
// shared and retained), which grows as the bytes arrive (body.go). An
// MPUB's body is as long as its parts (spec.byParts), whatever n says.
func (c *client) readSizedBody(spec *commandSpec) ([]byte, error) {
	cmd, code, limit := spec.name, spec.bodyCode, spec.limit(c.lim)
	what := "body"
	if spec.oneMessage {
		what = "message body"
	}
	size, err := wire.ReadSize(c.reader)
	if err != nil {
		return nil, wire.NewFatalClientErr(code, "%s failed to read %s size", cmd, what).WithParent(err)
	}
	if size <= 0 {
		return nil, wire.NewFatalClientErr(code, "%s invalid %s size %d", cmd, what, size)
	}
	if int64(size) > limit {
		if spec.oneMessage {
			return nil, wire.NewFatalClientErr(code, "%s message too big %d > %d", cmd, size, limit)
		}
		return nil, wire.NewFatalClientErr(code, "%s body too big %d > %d", cmd, size, limit)
	}
	var (
		src   io.Reader = c.reader
		check bodyCheck
		want  = int64(size)
	)
	if spec.byParts != nil {
		if src, check, want, err = spec.byParts(c, want); err != nil {
			return nil, err
		}
		limit += 4 // the parts' total is at most limit; the count comes before them
	}
	var into []byte
	if spec.pooledBody {
		c.mpubBufs = pubBufferPool.Get().(*pubBuffers)
		if want >= 0 {
			into = c.mpubBufs.bodyFor(int(want))
		}
	}
	body, err := readBody(c.d.lifetime(), src, want, limit, c.d.unfinishedBodies(), check, into)
	if err == nil && spec.byParts != nil {
		body, err = finishMPUB(c.d.lifetime(), body, src, limit, c.d.unfinishedBodies())
	}
	if err != nil && c.mpubBufs != nil {
		c.takePubBuffers().release()
	}
	switch {
	case err == nil:
		return body, nil
	case isFatalClientErr(err):
		return nil, err
	case errors.Is(err, errBodyBudget):
		return nil, wire.NewFatalClientErr(spec.failCode, "%s failed: %s", cmd, err)
	}
	return nil, wire.NewFatalClientErr(code, "%s failed to read %s", cmd, what).WithParent(err)
}

// errBase10 is the parent NSQ logs for a number it cannot parse.
var errBase10 = errors.New("failed to convert to Base10")

// base10 reads a command's number as NSQ does: decimal digits only, no
// sign, into an unsigned 64-bit value that wraps on overflow; an empty
// parameter is 0. strconv would take "-1" and "+5", which NSQ refuses as
// unparsable with its own error text.
func base10(p []byte) (uint64, error) {
	var n uint64
	for _, d := range p {
		if d < '0' || d > '9' {
			return 0, errBase10
		}
		n = n*10 + uint64(d-'0')
	}
	return n, nil
}

func checkTopic(c *client, params [][]byte) error {
	if !validName(string(params[1])) {
		return wire.NewFatalClientErr("E_BAD_TOPIC", "%s topic name %q is not valid", params[0], params[1])
	}
	return nil
}

func checkDPUB(c *client, params [][]byte) error {
	if err := checkTopic(c, params); err != nil {
		return err
	}
	ms, err := base10(params[2])
	if err != nil {
		return wire.NewFatalClientErr("E_INVALID", "DPUB could not parse timeout %s", params[2]).WithParent(err)
	}
	if d := time.Duration(ms) * time.Millisecond; d < 0 || d > c.lim.MaxDeferTimeout {
		return wire.NewFatalClientErr("E_INVALID", "DPUB timeout %d out of range 0-%d", ms, c.lim.MaxDeferTimeout.Milliseconds())
	}
	return nil
}

func checkMsgID(c *client, params [][]byte) error {
	if len(params[1]) != MsgIDLength {
		return wire.NewFatalClientErr("E_INVALID", "invalid message ID")
	}
	return nil
}

func msgID(p []byte) (id MessageID) {
	copy(id[:], p)
	return id
}

func (c *client) ready(params [][]byte, _ []byte) ([]byte, error) {
	count := int64(1)
	if len(params) > 1 {
		n, err := base10(params[1])
		if err != nil {
			return nil, wire.NewFatalClientErr("E_INVALID", "RDY could not parse count %s", params[1]).WithParent(err)
		}
		count = int64(n)
	}
	if count < 0 || count > c.lim.MaxRdyCount {
		return nil, wire.NewFatalClientErr("E_INVALID", "RDY count %d out of range 0-%d", count, c.lim.MaxRdyCount)
	}
	sub, _, _ := c.subscription()
	sub.SetReady(count)
	return nil, nil
}

func (c *client) finish(params [][]byte, _ []byte) ([]byte, error) {
	sub, _, _ := c.subscription()
	return nil, sub.Finish(msgID(params[1]))
}

func (c *client) requeue(params [][]byte, _ []byte) ([]byte, error) {
	ms, err := base10(params[2])
	if err != nil {
		return nil, wire.NewFatalClientErr("E_INVALID", "REQ could not parse timeout %s", params[2]).WithParent(err)
	}
	delay := time.Duration(ms) * time.Millisecond
	if limit := c.lim.MaxReqTimeout; delay > limit || delay < 0 {
		clamped := min(max(delay, 0), limit)
		c.logf(slog.LevelInfo, "PROTOCOL(V2): [%s] REQ timeout %d out of range 0-%d. Setting to %d",
			c.remoteAddr, delay, limit, clamped)
		delay = clamped
	}
	sub, _, _ := c.subscription()
	return nil, sub.Requeue(msgID(params[1]), delay)
}

func (c *client) touch(params [][]byte, _ []byte) ([]byte, error) {
	sub, _, _ := c.subscription()
	return nil, sub.Touch(msgID(params[1]))
}

func (c *client) startClose(_ [][]byte, _ []byte) ([]byte, error) {
	sub, _, _ := c.subscription()
	sub.StartClose()
	c.state.Store(stateClosing)
	return wire.CloseWait, nil
}

// checkSUB is SUB's checks before AUTH, in NSQ's order.
func checkSUB(c *client, params [][]byte) error {
	if c.heartbeatInterval <= 0 {
		return wire.NewFatalClientErr("E_INVALID", "cannot SUB with heartbeats disabled")
	}
	if len(params) < 3 {
		return wire.NewFatalClientErr("E_INVALID", "SUB insufficient number of parameters")
	}
	if !validName(string(params[1])) {
		return wire.NewFatalClientErr("E_BAD_TOPIC", "SUB topic name %q is not valid", params[1])
	}
	if !validName(string(params[2])) {
		return wire.NewFatalClientErr("E_BAD_CHANNEL", "SUB channel name %q is not valid", params[2])
	}
	return nil
}

func (c *client) subscribe(params [][]byte, _ []byte) ([]byte, error) {
	topicName, channelName := string(params[1]), string(params[2])
	// An ephemeral channel (or topic) can be deleted between lookup and
	// subscribe when its last client leaves; retry with it recreated. A
	// retired ephemeral topic stays in the daemon's map for a moment, hence
	// the short waits.
	var lastErr error
	for i := 0; i < ephemeralRetries; i++ {
		if i > 1 {
			time.Sleep(time.Duration(i) * time.Millisecond)
		}
		t, err := c.d.consumeFrom(topicName, channelName)
		if err != nil {
			return nil, wire.NewFatalClientErr("E_SUB_FAILED", "SUB failed %s", err).WithParent(err)
		}
		if err := c.d.refuseNewChannel(t, channelName); err != nil {
			return nil, wire.NewFatalClientErr("E_SUB_FAILED", "SUB failed %s", err).WithParent(err)
		}
		ch, err := t.GetChannel(channelName)
		if err != nil {
			lastErr = err
			continue
		}
		sub, err := ch.Subscribe(c, c.msgTimeout, c.sampleRate, c.lim.MaxChannelConsumers)
		if errors.Is(err, errTooManySubs) {
			return nil, wire.NewFatalClientErr("E_SUB_FAILED", "SUB failed consumers for %s:%s exceeds limit of %d", topicName, channelName, c.lim.MaxChannelConsumers)
		}
		if err != nil {
			lastErr = err
			continue
		}
		c.d.placeSubscription(sub, c.topology)
		c.subscribed.Store(&clientSubscription{sub, t, ch})
		c.state.Store(stateSubscribed)
		return wire.OK, nil
	}
	return nil, wire.NewFatalClientErr("E_SUB_FAILED", "SUB failed to subscribe to %s:%s: %v", topicName, channelName, lastErr)
}

func (c *client) pub(params [][]byte, body []byte) ([]byte, error) {
	return c.publishOne("PUB", "E_PUB_FAILED", c.pubTopic(params[1]), body, 0)
}

func (c *client) dpub(params [][]byte, body []byte) ([]byte, error) {
	topic := c.pubTopic(params[1])
	ms, _ := base10(params[2]) // checked by checkDPUB
	return c.publishOne("DPUB", "E_DPUB_FAILED", topic, body, time.Duration(ms)*time.Millisecond)
}

// pubTopic is the topic parameter p as a string, the same string as last
// time when p names the same topic: a producer mostly publishes to one
// topic, and converting it anew would allocate on every command.
func (c *client) pubTopic(p []byte) string {
	if string(p) != c.lastPubTopic {
		c.lastPubTopic = string(p)
	}
	return c.lastPubTopic
}

// publishOne publishes a single body without allocating a slice for it.
func (c *client) publishOne(cmd, code, topicName string, body []byte, deferFor time.Duration) ([]byte, error) {
	c.oneBody[0] = body
	resp, err := c.publish(cmd, code, topicName, c.oneBody[:], deferFor, nil)
	c.oneBody[0] = nil // the message holds the body now; don't pin it here
	return resp, err
}

// publish publishes bodies read into pb (nil: not an MPUB's buffers).
func (c *client) publish(cmd, code, topicName string, bodies [][]byte, deferFor time.Duration, pb *pubBuffers) ([]byte, error) {
	src := publishSource{secret: c.authz.secretValue(), bufs: pb}
	if err := c.d.publishTo(c.d.lifetime(), topicName, bodies, deferFor, src); err != nil {
		return nil, wire.NewFatalClientErr(code, "%s failed %s", cmd, err).WithParent(err)
	}
	c.recordPub(topicName, len(bodies))
	return wire.OK, nil
}

func (c *client) mpubLimits() bodyLimits {
	return bodyLimits{c.lim.MaxBodySize, c.lim.MaxMsgSize}
}

// mpubSource reads an MPUB body as NSQ does: its parts, read from the
// stream, say where it ends, and the size the command declared was only
// checked (1..--max-body-size), so a client that counts it short
// (segmentio/nsq-go counts only the parts' bytes) is served as by NSQ. The
// connection's one walk checks the part headers as they arrive (one MPUB
// is read at a time).
func (c *client) mpubSource(declared int64) (io.Reader, bodyCheck, int64, error) {
	c.mpubWalk = newMPUBWalk(c.mpubLimits(), "MPUB")
	return mpubSource(c.reader, &c.mpubWalk, declared)
}

// mpub parses every part before it creates the topic or queues anything
// (docs/protocol.md#mpub), so a bad body changes nothing.
func (c *client) mpub(params [][]byte, body []byte) ([]byte, error) {
	pb := c.takePubBuffers()
	defer pb.release()
	parts, err := splitMPUBInto(pb.parts, body, c.mpubLimits(), "MPUB")
	pb.parts = parts
	if err != nil {
		return nil, err
	}
	return c.publish("MPUB", "E_MPUB_FAILED", c.pubTopic(params[1]), packBodies(parts, body), 0, pb)
}

// takePubBuffers takes the buffers the MPUB being read got (c.mpubBufs).
func (c *client) takePubBuffers() *pubBuffers {
	pb := c.mpubBufs
	c.mpubBufs = nil
	return pb
}

// cleanup runs when the read loop ends.
func (c *client) cleanup() {
	c.close()
	c.stopHeartbeats()
	if sub, _, _ := c.subscription(); sub != nil {
		sub.Unsubscribe()
	}
	// wait for an in-progress writer so no goroutine outlives the client
	c.writeMu.Lock()
	c.releaseTransportLocked()
	c.writeMu.Unlock()
}
