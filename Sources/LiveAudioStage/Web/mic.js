// A phone as the room's microphone: the page opens the microphone (the browser's echo cancellation, noise
// suppression and gain control off unless switched on), captures it in an AudioWorklet at 48 kHz, and sends it to the
// room over the stage's WebSocket in 20 ms packets — Opus through WebCodecs where the browser has it (48 kbit/s), 16-bit
// PCM otherwise — each stamped with the capture time of its first frame on this page's clock (performance.now(), µs).
// The room reads that clock over the same socket (it sends its time, the page answers with its own) and calibrates
// what the stamps cannot see by playing chirps the phone hears. The packet layout is PhoneAudioPacket's (Swift).
// While it sings, the page draws its own voice's pitch lane: its part's line and notes, and its pitch as the room
// tracked it (the room's tick has every voice's), which comes `--phone-delay` after it was sung.
"use strict";

import { emptyLane, laneFor, addPitch, drawLane } from "/lane.js";

const RATE = 48000;
const FRAMES = 960; // 20 ms
const HEADER = 24;

export class Mic {
  // socket: a function giving the page's current WebSocket; el: the ids of the page's mic elements.
  constructor(socket, el) {
    this.socket = socket;
    this.el = el;
    this.state = { mode: "off", voice: null, offset: null, error: null, note: "", level: 0, codec: null, packets: 0, bytes: 0,
                   firstCapture: null, calibrations: 0, switches: { echoCancellation: false, noiseSuppression: false, autoGainControl: false },
                   lane: emptyLane(), pitch: null, target: null };
    // The song's lines: the first voice's part's, each voice's part and the other parts' lines (hello, song).
    this.lines = null;
    this.songNumber = null;
    this.keyCents = 0;
    window.phoneMic = this.state;
    this.sequence = 0;
    this.first = true;
    this.buffer = new Float32Array(FRAMES);
    this.filled = 0;
    this.bufferFrame = 0;
    this.stamps = [];
    this.encodedStamps = [];
    this.context = null;
    this.encoder = null;
    this.bound = false;
  }

  $(id) { return document.getElementById(id); }

  // The page's controls: the button, the switches, the calibration.
  bind() {
    if (this.bound) return;
    this.bound = true;
    // A page closed or reloaded gives its voice back at once (a connection that merely drops keeps it a while).
    window.addEventListener("pagehide", () => { if (this.state.mode !== "off") this.send({ type: "phone", action: "stop" }); });
    const e = this.el;
    this.$(e.start).addEventListener("click", () => (this.state.mode === "off" ? this.start() : this.stop()));
    this.$(e.calibrate).addEventListener("click", () => this.send({ type: "phone", id: "mic-calibrate", action: "calibrate" }));
    for (const name of Object.keys(this.state.switches)) {
      const box = this.$(e[name]);
      if (!box) continue;
      box.checked = false;
      box.addEventListener("change", () => { this.state.switches[name] = box.checked; });
    }
    this.show();
  }

  // Whether this page may offer the microphone (the stage says phones are taken, a secure page, a browser that has one).
  available(hello) {
    return Boolean(hello && hello.phones > 0);
  }

  show() {
    const s = this.state, e = this.el;
    const button = this.$(e.start);
    if (button) button.textContent = s.mode === "off" ? "Sing with this phone" : "Stop singing with this phone";
    const text = s.error ? s.error
      : s.mode === "off" ? "" : s.mode === "starting" ? "opening the microphone…"
      : s.offset === null ? `voice ${s.voice ?? "?"}: listening to the room's tones…`
      : `voice ${s.voice}: singing (${s.codec}); the phone is ${Math.round(s.offset * 1000)} ms behind the room`;
    const state = this.$(e.state);
    if (state) state.textContent = text + (s.note ? ` ${s.note}` : "");
    const level = this.$(e.level);
    if (level) level.value = s.level;
    const calibrate = this.$(e.calibrate);
    if (calibrate) calibrate.disabled = s.mode !== "singing";
    const lane = this.$(e.lane);
    if (lane) lane.hidden = s.mode !== "singing";
  }

  send(message) {
    const socket = this.socket();
    if (socket && socket.readyState === WebSocket.OPEN) socket.send(JSON.stringify(message));
  }

  // The room closed the connection for what this phone sent (1008): it is not sung with again until tapped, so a
  // page that sends what the room refuses does not do it again with every reconnect.
  onPolicyClose(reason) {
    if (this.state.mode === "off") return;
    this.state.error = `the room stopped this phone: ${reason || "what it sent was refused"}`;
    this.teardown();
  }

  // The socket (re)opened: a phone that was singing takes its voice again, its audio a new run.
  onOpen() {
    // (A page still opening its microphone has its claim already: start() makes it first.)
    if (this.state.mode === "off") return;
    this.first = true;
    // Its offset as calibrated before: no calibration again; its claim: the voice it had, and its clock.
    this.send({ type: "phone", id: "mic-sing", action: "sing", offset: this.state.offset, claim: this.claim });
  }

  // The song's lines as hello and a room's song event give them: for a new song, a new lane.
  song(m) {
    if (!Array.isArray(m.lines)) return;
    this.lines = { main: m.lines, parts: Array.isArray(m.parts) ? m.parts : null, partLines: m.partLines || {} };
    if (m.type === "song" && m.number !== this.songNumber) {
      this.songNumber = m.number;
      this.state.lane = emptyLane();
    }
  }

  // The lines of the part this phone's voice sings (the song's own with one voice).
  partLines() {
    const v = this.state.voice, l = this.lines;
    if (!l || !v) return null;
    if (!l.parts) return l.main;
    const part = l.parts[v - 1];
    if (part === undefined) return null;
    return part === l.parts[0] ? l.main : l.partLines[String(part)] || null;
  }

  // Every tick, while singing: this voice's line, pitch and note from the room, drawn on the page's lane.
  tick(m) {
    const s = this.state;
    if (s.mode !== "singing" || !s.voice) return;
    if (!Array.isArray(m.voices)) {
      // Between takes, or a song without a chart: no lane.
      drawLane(this.$(this.el.lane), emptyLane(), m.position);
      return;
    }
    const mine = m.voices[s.voice - 1];
    const lines = this.partLines();
    const index = mine ? mine.line : null;
    const singing = Boolean(lines && index !== null && index !== undefined && lines[index]);
    if (singing) {
      s.lane = laneFor(s.lane, lines, index);
      if (mine.voiced && mine.midi !== null && mine.midi !== undefined) addPitch(s.lane, mine.time, mine.midi, this.keyCents / 100);
    }
    s.pitch = mine && mine.voiced ? mine.frequency : null;
    s.target = mine ? mine.target : null;
    drawLane(this.$(this.el.lane), singing ? s.lane : emptyLane(), m.position);
  }

  // A message from the room: true when it was the microphone's alone (the song, its status and the ticks are the
  // page's too).
  onMessage(m) {
    if (m.type === "hello" || m.type === "song") { this.song(m); return false; }
    if (m.type === "status") { this.keyCents = m.keyCents || 0; return false; }
    if (m.type === "tick") { this.tick(m); return false; }
    if (m.type === "clock") {
      this.send({ type: "phone", action: "clock", room: m.room, phone: performance.now() * 1000 });
      return true;
    }
    if (m.type === "phone-status") {
      this.state.status = m;
      return true;
    }
    if (m.type === "phone") {
      // (After a stop of its own, a packet still on its way is answered so: nothing to stop.)
      if (m.ended && this.state.mode !== "off") { this.state.error = `the room stopped this phone: ${m.ended}`; this.teardown(); }
      if (m.offset !== undefined) { this.state.offset = m.offset; this.state.calibrations += 1; this.state.error = null; }
      if (m.error) this.state.note = `(${m.error})`;
      else this.state.note = "";
      this.show();
      return true;
    }
    if (m.type === "reply" && typeof m.id === "string" && m.id.startsWith("mic-")) {
      if (m.id === "mic-sing") {
        if (m.ok) {
          if (this.state.voice !== (m.data && m.data.voice)) this.state.lane = emptyLane();
          this.state.voice = m.data && m.data.voice; this.state.mode = "singing"; this.state.error = null;
        }
        else { this.state.error = m.error; this.teardown(); }
      } else if (!m.ok) {
        this.state.note = `(${m.error})`;
      }
      this.show();
      return true;
    }
    return false;
  }

  async start() {
    const s = this.state;
    s.error = null;
    // A name for this singing, new each time the page starts: on a reconnect it gets its voice back by it.
    const bytes = new Uint8Array(16);
    crypto.getRandomValues(bytes);
    this.claim = Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
    if (!window.isSecureContext || !navigator.mediaDevices || !navigator.mediaDevices.getUserMedia) {
      s.error = "the browser gives the microphone to secure (https) pages only: open the stage's https address";
      this.show();
      return;
    }
    s.mode = "starting";
    this.show();
    try {
      this.stream = await navigator.mediaDevices.getUserMedia({ audio: { ...s.switches, channelCount: 1 } });
    } catch (error) {
      s.mode = "off";
      s.error = `no microphone: ${error.name === "NotAllowedError" ? "the browser was not allowed to use it" : error.message || error.name}`;
      this.show();
      return;
    }
    this.context = new AudioContext({ sampleRate: RATE, latencyHint: "interactive" });
    await this.context.audioWorklet.addModule("/mic-worklet.js");
    const source = this.context.createMediaStreamSource(this.stream);
    this.node = new AudioWorkletNode(this.context, "la-capture", { numberOfInputs: 1, numberOfOutputs: 0 });
    this.node.port.onmessage = (event) => this.frames(event.data.frame, event.data.samples);
    source.connect(this.node);
    await this.openEncoder();
    s.codec = this.encoder ? "Opus" : "PCM";
    this.sequence = 0;
    this.first = true;
    this.filled = 0;
    // A new audio context: its clock against the page's is read anew.
    this.stamps = [];
    this.encodedStamps = [];
    this.send({ type: "phone", id: "mic-sing", action: "sing", claim: this.claim });
  }

  async openEncoder() {
    this.encoder = null;
    if (!("AudioEncoder" in window)) return;
    const config = { codec: "opus", sampleRate: RATE, numberOfChannels: 1, bitrate: 48000, opus: { frameDuration: 20000, complexity: 5 } };
    try {
      const support = await AudioEncoder.isConfigSupported(config);
      if (!support.supported) return;
      this.encoder = new AudioEncoder({
        output: (chunk) => {
          const payload = new Uint8Array(chunk.byteLength);
          chunk.copyTo(payload);
          // Each 20 ms given to the encoder comes out as one packet, in order: its stamp is the one it went in with
          // (the encoder's own timestamps count frames from the first, and would not follow the page's clock).
          const stamp = this.encodedStamps.length ? this.encodedStamps.shift() : chunk.timestamp;
          this.packet(1, stamp, Math.round((chunk.duration || 20000) * RATE / 1e6), payload);
        },
        error: (e) => { this.state.note = `(Opus: ${e.message}; PCM from now on)`; this.encoder = null; },
      });
      this.encoder.configure(config);
    } catch {
      this.encoder = null;
    }
  }

  stop() {
    this.send({ type: "phone", id: "mic-stop", action: "stop" });
    this.teardown();
  }

  teardown() {
    const s = this.state;
    s.mode = "off";
    s.voice = null;
    s.offset = null;
    if (this.stream) for (const t of this.stream.getTracks()) t.stop();
    if (this.context) this.context.close();
    if (this.encoder && this.encoder.state !== "closed") this.encoder.close();
    this.stream = null;
    this.context = null;
    this.encoder = null;
    this.show();
  }

  // The page's clock at a frame of the audio context: the context's clock against performance.now(), as the
  // browser pairs them, smoothed over the last pairs (a pair is taken with every packet). The median of the last 64
  // follows a step (an audio context that stalled under load) within a second; a line over 500 pairs, tried, was
  // steadier between steps but took seconds to follow one, and a page under load placed its audio late meanwhile.
  stampMicros(frame) {
    const t = this.context.getOutputTimestamp();
    if (t.contextTime > 0) {
      this.stamps.push(t.performanceTime - t.contextTime * 1000);
      if (this.stamps.length > 64) this.stamps.shift();
    }
    const sorted = [...this.stamps].sort((a, b) => a - b);
    const offset = sorted.length ? sorted[sorted.length >> 1] : performance.now() - this.context.currentTime * 1000;
    return (offset + (frame / RATE) * 1000) * 1000;
  }

  // 128 frames at a time from the worklet, gathered into 20 ms packets.
  frames(frame, samples) {
    if (this.state.mode === "off") return;
    let peak = 0;
    for (let i = 0; i < samples.length; i++) peak = Math.max(peak, Math.abs(samples[i]));
    this.state.level = Math.max(peak, this.state.level * 0.9);
    let at = 0;
    while (at < samples.length) {
      if (this.filled === 0) this.bufferFrame = frame + at;
      const n = Math.min(FRAMES - this.filled, samples.length - at);
      this.buffer.set(samples.subarray(at, at + n), this.filled);
      this.filled += n;
      at += n;
      if (this.filled === FRAMES) {
        this.filled = 0;
        this.flush();
      }
    }
  }

  flush() {
    const stamp = Math.round(this.stampMicros(this.bufferFrame));
    // Every 50th packet's frame and stamp, for whoever checks the page's clock (the tests).
    if ((this.state.packets % 50) === 0) {
      this.state.stamps = this.state.stamps || [];
      if (this.state.stamps.length < 400) this.state.stamps.push([this.bufferFrame, stamp, Math.round(performance.now() * 1000)]);
    }
    if (this.state.firstCapture === null) this.state.firstCapture = stamp;
    if (this.encoder) {
      const data = new AudioData({ format: "f32-planar", sampleRate: RATE, numberOfFrames: FRAMES, numberOfChannels: 1, timestamp: stamp, data: this.buffer.slice() });
      this.encodedStamps.push(stamp);
      this.encoder.encode(data);
      data.close();
      return;
    }
    const pcm = new Uint8Array(FRAMES * 2);
    const view = new DataView(pcm.buffer);
    for (let i = 0; i < FRAMES; i++) view.setInt16(2 * i, Math.max(-32768, Math.min(32767, Math.round(this.buffer[i] * 32768))), true);
    this.packet(0, stamp, FRAMES, pcm);
  }

  // One message: the 24-byte header (PhoneAudioPacket) and the payload.
  packet(codec, stampMicros, frames, payload) {
    const socket = this.socket();
    if (!socket || socket.readyState !== WebSocket.OPEN || this.state.mode !== "singing") return;
    // A socket that does not take what it is given is not given more (the room would only get it late).
    if (socket.bufferedAmount > 64 * 1024) { this.first = true; return; }
    const bytes = new Uint8Array(HEADER + payload.length);
    const view = new DataView(bytes.buffer);
    bytes[0] = 0x4c; bytes[1] = 0x41; bytes[2] = 1; bytes[3] = codec;
    view.setUint32(4, this.sequence >>> 0, true);
    view.setBigInt64(8, BigInt(stampMicros), true);
    view.setUint32(16, RATE, true);
    bytes[20] = 1;
    bytes[21] = this.first ? 1 : 0;
    view.setUint16(22, frames, true);
    bytes.set(payload, HEADER);
    socket.send(bytes);
    this.sequence = (this.sequence + 1) >>> 0;
    this.first = false;
    this.state.packets += 1;
    this.state.bytes += bytes.length;
    if (this.state.packets % 25 === 0) this.show();
  }
}
