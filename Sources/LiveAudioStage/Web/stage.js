// The LiveAudio stage: one WebSocket to the session (hello, then ticks 30 times a second and events when they
// change), the page drawn from what it says, and the controls sent back. No library, no build step.
"use strict";

import { Mic } from "/mic.js";
import { emptyLane, laneFor, addPitch, drawLane } from "/lane.js";

const $ = (id) => document.getElementById(id);
const token = new URLSearchParams(location.search).get("token");

// What the page knows, also for tests and for anyone curious in the console.
const stage = {
  connected: false, hello: null, song: null, tick: null, status: null, lyrics: null, score: null, queue: null, join: null, scores: null,
  ticks: 0, connects: 0, closes: [], ended: false, lineChanges: [], lane: emptyLane(), replies: [],
  socket: null,
};
window.stage = stage;

let socket = null;
let backoff = 500;
let nextId = 1;
// Singing with this page's microphone, when the room takes phones (the stage's page on a phone).
const mic = new Mic(() => socket, { start: "mic-start", calibrate: "mic-calibrate", state: "mic-state", level: "mic-level", lane: "mic-lane",
                                    echoCancellation: "mic-echo", noiseSuppression: "mic-noise", autoGainControl: "mic-gain" });

function connect() {
  const url = `${location.protocol === "https:" ? "wss" : "ws"}://${location.host}/ws` + (token ? `?token=${encodeURIComponent(token)}` : "");
  socket = new WebSocket(url);
  stage.socket = socket;
  socket.onopen = () => {
    stage.connected = true;
    stage.connects += 1;
    backoff = 500;
    $("connection").textContent = "connected";
    mic.onOpen();
  };
  socket.onmessage = (event) => {
    let m;
    try { m = JSON.parse(event.data); } catch { return; }
    if (mic.onMessage(m)) return;
    switch (m.type) {
      case "hello": onHello(m); break;
      case "song": onSong(m); break;
      case "tick": onTick(m); break;
      case "status": onStatus(m); break;
      case "lyrics": onLyrics(m); break;
      case "score": onScore(m); break;
      case "reply": onReply(m); break;
      case "queue": onQueue(m); break;
      case "join": onJoin(m); break;
      case "scores": onScores(m); break;
    }
  };
  socket.onclose = (event) => {
    stage.connected = false;
    stage.closes.push({ code: event.code, reason: event.reason });
    if (event.code === 1008) mic.onPolicyClose(event.reason);
    if (event.code === 1000 && event.reason === "the session has ended") {
      stage.ended = true;
      $("connection").textContent = "the session has ended";
      for (const e of document.querySelectorAll("#controls button, #controls input")) e.disabled = true;
      return;
    }
    // A dropped connection (or a full stage, 1013): again, waiting longer each time up to 4 s.
    $("connection").textContent = event.code === 1013 ? "the stage is full: trying again…" : "connection lost: reconnecting…";
    setTimeout(connect, backoff);
    backoff = Math.min(4000, backoff * 2);
  };
  socket.onerror = () => {};
}

function send(action, fields = {}, type = "control") {
  if (!socket || socket.readyState !== WebSocket.OPEN) return;
  socket.send(JSON.stringify({ type, id: String(nextId++), action, ...fields }));
}

function clock(s) {
  s = Math.max(0, s || 0);
  const m = Math.floor(s / 60);
  return `${m}:${(s - m * 60).toFixed(1).padStart(4, "0")}`;
}

function decibels(db) {
  return db === null || db === undefined ? "off" : `${db >= 0 ? "+" : ""}${db.toFixed(1)} dB`;
}

// hello: the kind of session, the title, the chart's lines, and whether this page may control.
function onHello(m) {
  stage.hello = m;
  showSong(m);
  buildControls(m);
  $("control-note").textContent = m.canControl ? "" : "Viewing only: the controls need the address with the token that the command printed.";
  $("evening").classList.toggle("hidden", !m.evening);
  for (const e of document.querySelectorAll(".host-only")) e.classList.toggle("hidden", !m.canControl);
  const phones = mic.available(m) && m.canControl;
  $("mic").classList.toggle("hidden", !phones);
  if (phones) mic.bind();
}

// The evening (a karaoke night over a song library): the join code, the queue, the last take's scores. Every text
// from the stage is set as text, never as markup.
function minutes(s) {
  if (s === null || s === undefined) return "";
  s = Math.max(0, Math.round(s));
  return `${Math.floor(s / 60)}:${String(s % 60).padStart(2, "0")}`;
}

// Seconds until the song playing now ends (0 between songs).
function remaining() {
  const t = stage.tick, st = stage.status, song = stage.song;
  if (!t || !st || !song || song.startsIn > 0 || t.state !== "playing") return 0;
  return Math.max(0, (st.regionEnd || 0) - t.position);
}

function onJoin(m) {
  stage.join = m;
  $("join-url").textContent = m.url;
  if (m.qr) $("join-qr").src = "data:image/svg+xml;charset=utf-8," + encodeURIComponent(m.qr);
}

function onQueue(m) {
  stage.queue = m;
  // When each entry was first seen here (for tests: how soon a phone's song reaches every screen).
  stage.queueSeen = stage.queueSeen || {};
  for (const e of m.entries) if (!(e.id in stage.queueSeen)) stage.queueSeen[e.id] = Date.now();
  $("queue-paused").classList.toggle("hidden", !m.paused);
  $("queue-pause").textContent = m.paused ? "Resume the queue" : "Pause the queue";
  $("queue-empty").classList.toggle("hidden", m.entries.length > 0);
  const host = stage.hello && stage.hello.canControl;
  const list = $("queue");
  list.replaceChildren();
  const wait = remaining();
  for (const e of m.entries) {
    const li = document.createElement("li");
    li.dataset.entry = e.id;
    const who = document.createElement("strong");
    who.className = "singer";
    who.textContent = (e.singer ? e.singer.name : "") + (e.partner ? " & " + e.partner.name : "");
    const what = document.createElement("span");
    what.className = "song";
    what.textContent = ` ${e.title}${e.artist ? " – " + e.artist : ""}`;
    const when = document.createElement("span");
    when.className = "wait";
    when.textContent = e.state === "up" ? " · up next" : ` · in about ${minutes(wait + e.startsAfter)}`;
    li.append(who, what, when);
    // Up next, its take is made: "Next song" skips it; the others move and go.
    if (host && e.state !== "up") {
      for (const [label, act] of [["▲", () => send("move", { entry: e.id, position: Math.max(1, e.place - 1) }, "evening")],
        ["▼", () => send("move", { entry: e.id, position: e.place + 1 }, "evening")],
        ["✕", () => send("dequeue", { entry: e.id }, "evening")]]) {
        const b = document.createElement("button");
        b.type = "button";
        b.className = "small";
        b.textContent = label;
        b.setAttribute("aria-label", `${label === "✕" ? "Remove" : label === "▲" ? "Move up" : "Move down"}: ${e.title}`);
        b.addEventListener("click", act);
        li.append(" ", b);
      }
    }
    list.append(li);
  }
}

function onScores(m) {
  stage.scores = m;
  $("scores-box").classList.remove("hidden");
  $("scores-song").textContent = `${m.title}${m.artist ? " – " + m.artist : ""}`;
  $("scores-difficulty").textContent = m.difficulty;
  const results = $("scores-results");
  results.replaceChildren(...m.results.map((r) => {
    const li = document.createElement("li");
    li.textContent = `${r.singer}: ${r.score} — place ${r.place}`;
    return li;
  }));
  const top = $("scores-top");
  top.replaceChildren(...m.top.map((s) => {
    const li = document.createElement("li");
    li.textContent = `${s.singer} ${s.score}${s.new ? " (new)" : ""}`;
    if (s.new) li.className = "new";
    return li;
  }));
}

// The song's title, artist and lines: from hello, and again from a room's song event when the next take comes.
function showSong(m) {
  $("title").textContent = m.title || "LiveAudio";
  $("artist").textContent = m.artist || "";
  document.title = `${m.title || "LiveAudio"} – stage`;
  const kind = stage.hello ? stage.hello.kind : "karaoke";
  for (const e of document.querySelectorAll(".karaoke-only")) e.classList.toggle("hidden", kind !== "karaoke" || (m.lines.length === 0 && e.id === "lyrics"));
  for (const e of document.querySelectorAll(".notes-only")) e.classList.toggle("hidden", !m.hasNotes);
}

// song (a room): the take playing or coming — its title, artist, lines — and the seconds until it starts.
function onSong(m) {
  const changed = !stage.song || stage.song.number !== m.number;
  stage.song = m;
  if (stage.hello) {
    Object.assign(stage.hello, { title: m.title, artist: m.artist, lines: m.lines, hasNotes: m.hasNotes, keyAdjustable: m.keyAdjustable });
  }
  if (changed) {
    // Another take: what the page showed of the last one goes.
    stage.lyrics = null;
    stage.score = null;
    stage.lane = emptyLane();
    $("line").textContent = "";
    $("next").textContent = "";
  }
  showSong(m);
  $("next-song").textContent = m.startsIn > 0 ? `Next: ${m.title || "the next song"} in ${m.startsIn} s` : "";
}

const meterNames = {
  voice: "Voice", monitorVoice: "Voice in headphones", accompaniment: "Accompaniment", output: "Output",
  input: "Input",
};

function onTick(m) {
  stage.tick = m;
  stage.ticks += 1;
  // While a song is sung the evening's panel is the join code in a corner; between songs, the queue and scores.
  document.body.classList.toggle("singing", !!(stage.song && stage.song.startsIn <= 0 && m.state === "playing"));
  $("position").textContent = clock(m.position);
  $("state").textContent = m.state;
  const st = stage.status;
  if (st && st.regionEnd > st.regionStart) {
    $("progress").value = Math.min(1, Math.max(0, (m.position - st.regionStart) / (st.regionEnd - st.regionStart)));
  } else if (!st || st.regionEnd === undefined) {
    $("progress").removeAttribute("value");
  }
  const meters = $("meters");
  for (const [name, [peak, rms]] of Object.entries(m.meters)) {
    let row = document.getElementById(`meter-${name}`);
    if (!row) {
      row = document.createElement("div");
      row.className = "meter";
      row.id = `meter-${name}`;
      const label = document.createElement("label");
      label.htmlFor = `meter-${name}-bar`;
      label.textContent = meterNames[name] || (name.startsWith("voice-") ? `Voice ${name.slice(6)}` : name);
      const bar = document.createElement("meter");
      bar.id = `meter-${name}-bar`;
      bar.min = -60; bar.max = 0; bar.low = -18; bar.high = -6; bar.optimum = -20;
      const text = document.createElement("output");
      text.id = `meter-${name}-text`;
      row.append(label, bar, text);
      meters.append(row);
    }
    const level = peak === null ? -60 : Math.max(-60, Math.min(0, peak));
    document.getElementById(`meter-${name}-bar`).value = level;
    document.getElementById(`meter-${name}-text`).textContent = peak === null ? "-inf dB" : `${peak.toFixed(1)} dB`;
  }
  if (m.loudness) {
    const l = m.loudness;
    const show = (id, v) => { $(id).textContent = v === null ? "–" : v.toFixed(1); };
    show("lufs-m", l.momentary); show("lufs-s", l.shortTerm); show("lufs-i", l.integrated);
    show("lufs-lra", l.range); show("lufs-tp", l.truePeak);
    $("loudness-of").textContent = stage.hello && stage.hello.kind === "karaoke" ? "The song's loudness" : "The stream's loudness";
  }
  if (stage.hello && stage.hello.kind === "karaoke") {
    showLine(m.position);
    const singing = followLane();
    if (m.pitch && m.pitch.voiced && m.pitch.midi !== null) {
      $("pitch").textContent = `${m.pitch.frequency.toFixed(1)} Hz`;
      if (singing) addPitch(stage.lane, m.pitch.time, m.pitch.midi, stage.status && stage.status.keyCents ? stage.status.keyCents / 100 : 0);
    } else {
      $("pitch").textContent = "–";
    }
    $("target").textContent = m.target === null ? "–" : noteName(m.target);
    drawLane($("lane"), singing ? stage.lane : emptyLane(), m.position);
  }
}

function noteName(midi) {
  const names = ["C", "C♯", "D", "D♯", "E", "F", "F♯", "G", "G♯", "A", "A♯", "B"];
  return names[((midi % 12) + 12) % 12] + (Math.floor(midi / 12) - 1);
}

function onStatus(m) {
  stage.status = m;
  $("length").textContent = clock(m.regionEnd);
  $("state").textContent = m.state;
  const parts = [];
  if (m.keyCents !== undefined) {
    $("key").textContent = `${m.keyCents >= 0 ? "+" : ""}${(m.keyCents / 100).toFixed(1)}`;
    parts.push(`tempo ${m.tempo.toFixed(2)}`, `round trip ${m.roundTripMs.toFixed(1)} ms (${m.roundTripSource})`,
      `underruns ${m.underruns}`);
  } else {
    parts.push(`${m.packets} packets`, `reconnects ${m.reconnects}`);
  }
  parts.push(`xruns ${m.xruns}`, `drops ${m.drops}`);
  $("status-line").textContent = parts.join(" · ");
  const outputs = $("outputs");
  outputs.replaceChildren(...m.outputs.map((o) => {
    const li = document.createElement("li");
    li.textContent = typeof o === "string" ? o
      : `${o.name}: ${o.state}, ${(o.bitRate / 1000).toFixed(0)} kbit/s, ${o.packets} packets, dropped ${o.dropped}, reconnects ${o.reconnects}`;
    return li;
  }));
  for (const [name, db] of Object.entries(m.volumes)) {
    const input = document.getElementById(`volume-${name}`);
    if (!input) continue;
    if (document.activeElement !== input) input.value = db === null ? input.min : db;
    document.getElementById(`volume-${name}-text`).textContent = decibels(db);
  }
  for (const [name, on] of Object.entries(m.mutes)) {
    const b = document.getElementById(`mute-${name}`);
    if (b) b.setAttribute("aria-pressed", on ? "true" : "false");
  }
  if (m.regionEnd !== undefined) {
    const seek = $("seek");
    seek.min = m.regionStart; seek.max = m.regionEnd;
  }
  $("pause").textContent = m.state === "paused" ? "Resume" : "Pause";
  $("pause").setAttribute("aria-pressed", m.state === "paused" ? "true" : "false");
  const canKey = stage.hello && stage.hello.canControl && m.keyAdjustable;
  $("key-up").disabled = !canKey;
  $("key-down").disabled = !canKey;
  if (m.state === "ended") $("connection").textContent = stage.hello && stage.hello.evening ? "between songs" : "the song has ended";
}

function onLyrics(m) {
  stage.lyrics = m;
  if (stage.tick) showLine(stage.tick.position);
}

// The line and its syllables from the chart (hello) and the line index the session says; the syllable sung now
// from the position of the newest tick.
function showLine(position) {
  const lines = stage.hello ? stage.hello.lines : [];
  const index = stage.lyrics ? stage.lyrics.line : null;
  const line = index === null || index === undefined ? null : lines[index];
  const el = $("line");
  const key = line ? `${index}` : "";
  if (el.dataset.key !== key) {
    el.dataset.key = key;
    el.replaceChildren();
    if (line) {
      for (const [i, s] of line.syllables.entries()) {
        const span = document.createElement("span");
        span.textContent = s.text;
        span.dataset.index = i;
        el.append(span);
      }
    }
    stage.lineChanges.push({ wallMs: Date.now(), line: index, text: line ? line.text : "" });
    $("next").textContent = stage.lyrics && stage.lyrics.next ? stage.lyrics.next : "";
  }
  if (!line) return;
  for (const span of el.children) {
    const s = line.syllables[Number(span.dataset.index)];
    span.className = position >= s.end ? "sung" : position >= s.start ? "now" : "";
  }
}

function onScore(m) {
  stage.score = m;
  $("score").textContent = String(m.total);
  $("score-parts").textContent = `(notes ${Math.round(m.notes)}, golden ${Math.round(m.golden)}, line bonus ${Math.round(m.lineBonus)})`;
  const last = m.lines[m.lines.length - 1];
  $("rating").textContent = last ? `${last.rating} (${Math.round(last.hitRatio * 100)} %): ${last.text}` : "–";
}

function onReply(m) {
  stage.replies.push(m);
  if (stage.replies.length > 100) stage.replies.shift();
  if (!m.ok) $("control-note").textContent = m.error;
}

// The pitch lane of the line being sung (lane.js): voice 1's. True when a line is being sung.
function followLane() {
  const lines = stage.hello ? stage.hello.lines : [];
  const index = stage.lyrics ? stage.lyrics.line : null;
  stage.lane = laneFor(stage.lane, lines, index);
  return index !== null && index !== undefined && Boolean(lines[index]);
}

// The controls: a range in dB for each volume (its lowest step is "off"), a toggle button for each mute.
function buildControls(hello) {
  const volumes = hello.kind === "karaoke"
    ? [["accompaniment", "Accompaniment volume"], ["voice", "Voice volume (song)"], ["monitorVoice", "Voice in headphones"]]
    : [["stream", "Stream volume"]];
  const mutes = hello.kind === "karaoke"
    ? [["accompaniment", "Mute accompaniment"], ["voice", "Mute voice"]] : [["stream", "Mute stream"]];
  const box = $("volumes");
  box.replaceChildren();
  for (const [name, text] of volumes) {
    const row = document.createElement("div");
    row.className = "row";
    const label = document.createElement("label");
    label.htmlFor = `volume-${name}`;
    label.textContent = `${text} (dB)`;
    const input = document.createElement("input");
    input.type = "range"; input.id = `volume-${name}`; input.min = "-61"; input.max = "12"; input.step = "1"; input.value = "0";
    input.setAttribute("aria-valuetext", "0 dB");
    const out = document.createElement("output");
    out.id = `volume-${name}-text`;
    out.htmlFor = input.id;
    input.disabled = !hello.canControl;
    input.addEventListener("change", () => {
      const v = Number(input.value);
      const db = v <= -61 ? "-inf" : v;
      input.setAttribute("aria-valuetext", v <= -61 ? "off" : `${v} dB`);
      send("volume", hello.kind === "karaoke" ? { part: name, db } : { db });
    });
    row.append(label, input, out);
    box.append(row);
  }
  const mbox = $("mutes");
  mbox.replaceChildren();
  for (const [name, text] of mutes) {
    const b = document.createElement("button");
    b.type = "button"; b.id = `mute-${name}`; b.textContent = text;
    b.setAttribute("aria-pressed", "false");
    b.disabled = !hello.canControl;
    b.addEventListener("click", () => {
      const on = b.getAttribute("aria-pressed") !== "true";
      send("mute", hello.kind === "karaoke" ? { part: name, on } : { on });
    });
    mbox.append(b);
  }
  for (const id of ["pause", "stop", "seek", "skip"]) $(id).disabled = !hello.canControl;
}

$("key-up").addEventListener("click", () => send("key", { step: 1 }));
$("key-down").addEventListener("click", () => send("key", { step: -1 }));
$("pause").addEventListener("click", () => send(stage.status && stage.status.state === "paused" ? "resume" : "pause"));
$("stop").addEventListener("click", () => send("stop"));
$("skip").addEventListener("click", () => send("skip"));
$("seek").addEventListener("change", () => send("seek", { seconds: Number($("seek").value) }));
$("queue-pause").addEventListener("click", () => send("pauseQueue", { on: !(stage.queue && stage.queue.paused) }, "evening"));

connect();
