package nsqd

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"time"

	"github.com/nsqgo/nsq/internal/version"
	"github.com/nsqgo/nsq/internal/wire"
)

// identifyRequest is the IDENTIFY body (docs/protocol.md#identify-fields);
// unknown keys are ignored.
type identifyRequest struct {
	identifyV2
	TopologyRegion string `json:"topology_region"`
	TopologyZone   string `json:"topology_zone"`
}

// identifyV2 is NSQ v1.3.0's part of the IDENTIFY body: its log line
// prints it with %+v, so its fields have NSQ's names, types and order.
type identifyV2 struct {
	ClientID            string `json:"client_id"`
	Hostname            string `json:"hostname"`
	HeartbeatInterval   int    `json:"heartbeat_interval"`
	OutputBufferSize    int    `json:"output_buffer_size"`
	OutputBufferTimeout int    `json:"output_buffer_timeout"`
	FeatureNegotiation  bool   `json:"feature_negotiation"`
	TLSv1               bool   `json:"tls_v1"`
	Deflate             bool   `json:"deflate"`
	DeflateLevel        int    `json:"deflate_level"`
	Snappy              bool   `json:"snappy"`
	SampleRate          int32  `json:"sample_rate"`
	UserAgent           string `json:"user_agent"`
	MsgTimeout          int    `json:"msg_timeout"`
}

type identifyResponse struct {
	MaxRdyCount         int64  `json:"max_rdy_count"`
	Version             string `json:"version"`
	MaxMsgTimeout       int64  `json:"max_msg_timeout"`
	MsgTimeout          int64  `json:"msg_timeout"`
	TLSv1               bool   `json:"tls_v1"`
	Deflate             bool   `json:"deflate"`
	DeflateLevel        int    `json:"deflate_level"`
	MaxDeflateLevel     int    `json:"max_deflate_level"`
	Snappy              bool   `json:"snappy"`
	SampleRate          int32  `json:"sample_rate"`
	AuthRequired        bool   `json:"auth_required"`
	OutputBufferSize    int    `json:"output_buffer_size"`
	OutputBufferTimeout int64  `json:"output_buffer_timeout"`
	TopologyRegion      string `json:"topology_region"`
	TopologyZone        string `json:"topology_zone"`
}

// identifySettings are the validated values IDENTIFY applies.
type identifySettings struct {
	heartbeat     time.Duration
	outputBufSize int
	outputBufTime time.Duration
	msgTimeout    time.Duration
	sampleRate    int32
	deflateLevel  int
}

// validateIdentify turns a request into settings or an error reason.
func validateIdentify(req *identifyRequest, o *clientLimits) (identifySettings, error) {
	s := identifySettings{
		heartbeat:     o.ClientTimeout / 2,
		outputBufSize: defaultOutputBufferLen,
		outputBufTime: o.OutputBufferTimeout,
		msgTimeout:    o.MsgTimeout,
	}
	// ms converts a client's milliseconds. A value too big for a Duration
	// saturates instead of wrapping: a wrapped (negative) value would pass
	// the "<= max" checks below (found by FuzzIdentify).
	ms := func(v int) time.Duration {
		const lim = int64(1<<63-1) / int64(time.Millisecond)
		switch {
		case int64(v) > lim:
			return 1<<63 - 1
		case int64(v) < -lim:
			return -1 << 63
		}
		return time.Duration(v) * time.Millisecond
	}
	switch hb := req.HeartbeatInterval; {
	case hb == -1:
		s.heartbeat = -1
	case hb == 0:
	case hb >= 1000 && ms(hb) <= o.MaxHeartbeatInterval:
		s.heartbeat = ms(hb)
	default:
		return s, fmt.Errorf("heartbeat interval (%d) is invalid", hb)
	}
	// timeout before size, as NSQ checks them
	switch ot := req.OutputBufferTimeout; {
	case ot == -1:
		s.outputBufTime = 0
	case ot == 0:
	case ms(ot) >= o.MinOutputBufferTimeout && ms(ot) <= o.MaxOutputBufferTimeout:
		s.outputBufTime = ms(ot)
	default:
		return s, fmt.Errorf("output buffer timeout (%d) is invalid", ot)
	}
	switch ob := req.OutputBufferSize; {
	case ob == -1:
		// no buffering, hence no flush timer either (NSQ reports 0)
		s.outputBufSize = 1
		s.outputBufTime = 0
	case ob == 0:
	case ob >= 64 && int64(ob) <= o.MaxOutputBufferSize:
		s.outputBufSize = ob
	default:
		return s, fmt.Errorf("output buffer size (%d) is invalid", ob)
	}
	if req.SampleRate < 0 || req.SampleRate > 99 {
		return s, fmt.Errorf("sample rate (%d) is invalid", req.SampleRate)
	}
	s.sampleRate = req.SampleRate
	switch mt := req.MsgTimeout; {
	case mt == 0:
	case mt >= 1000 && ms(mt) <= o.MaxMsgTimeout:
		s.msgTimeout = ms(mt)
	default:
		return s, fmt.Errorf("msg timeout (%d) is invalid", mt)
	}
	// As NSQ: the level asked for counts only when deflate is negotiated;
	// the answer reports the default (capped) otherwise.
	s.deflateLevel = defaultDeflateLevel
	if req.Deflate && o.DeflateEnabled && req.DeflateLevel > 0 {
		s.deflateLevel = req.DeflateLevel
	}
	s.deflateLevel = min(s.deflateLevel, o.MaxDeflateLevel)
	return s, nil
}

func (c *client) identify(_ [][]byte, body []byte) ([]byte, error) {
	var req identifyRequest
	if err := json.Unmarshal(body, &req); err != nil {
		return nil, wire.NewFatalClientErr("E_BAD_BODY", "IDENTIFY failed to decode JSON body").WithParent(err)
	}
	c.logf(slog.LevelDebug, "PROTOCOL(V2): [%s] %+v", c.remoteAddr, req.identifyV2)
	c.logf(slog.LevelInfo, "[%s] IDENTIFY: %+v", c.remoteAddr, req.identifyV2)
	s, err := validateIdentify(&req, c.lim)
	if err != nil {
		return nil, wire.NewFatalClientErr("E_BAD_BODY", "IDENTIFY %s", err).WithParent(err)
	}
	if req.ClientID != "" {
		c.clientID = req.ClientID
	}
	if req.Hostname != "" {
		c.hostname = req.Hostname
	}
	c.userAgent = req.UserAgent
	c.topology = topology{region: req.TopologyRegion, zone: req.TopologyZone}
	c.msgTimeout = s.msgTimeout
	c.sampleRate = s.sampleRate
	c.outputBufTimeout = s.outputBufTime
	c.publishIdentity()
	if s.outputBufSize != c.outputBufferSize {
		c.setOutputBuffer(s.outputBufSize)
	}
	if s.heartbeat != c.heartbeatInterval {
		c.setHeartbeatInterval(s.heartbeat)
	}
	if !req.FeatureNegotiation {
		return wire.OK, nil
	}
	f := c.offeredFeatures(&req, s.deflateLevel)
	if f.snappy && f.deflate {
		return nil, wire.NewFatalClientErr("E_IDENTIFY_FAILED", "cannot enable both deflate and snappy compression")
	}
	resp, err := json.Marshal(identifyResponse{
		MaxRdyCount:         c.lim.MaxRdyCount,
		Version:             version.Version,
		MaxMsgTimeout:       c.lim.MaxMsgTimeout.Milliseconds(),
		MsgTimeout:          c.msgTimeout.Milliseconds(),
		TLSv1:               f.tls,
		Deflate:             f.deflate,
		DeflateLevel:        s.deflateLevel,
		MaxDeflateLevel:     c.lim.MaxDeflateLevel,
		Snappy:              f.snappy,
		SampleRate:          c.sampleRate,
		AuthRequired:        c.d.authEnabled(),
		OutputBufferSize:    c.outputBufferSize,
		OutputBufferTimeout: c.outputBufTimeout.Milliseconds(),
		TopologyRegion:      c.lim.TopologyRegion,
		TopologyZone:        c.lim.TopologyZone,
	})
	if err != nil {
		return nil, wire.NewFatalClientErr("E_IDENTIFY_FAILED", "IDENTIFY failed %s", err).WithParent(err)
	}
	if f.any() {
		// the reply, then each upgrade and its OK (client_negotiate.go)
		return nil, c.negotiate(resp, f)
	}
	return resp, nil
}
