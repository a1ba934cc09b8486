// The pitch lane: a line's notes as bars, a row a semitone, and a voice's pitch as dots at the song's time it was
// sung to, folded by octaves into the lane. The stage's page draws voice 1's; a page that sings with its phone draws
// its own voice's. A lane is plain data ({ line, start, end, notes, points, range }), so a test can read it.
"use strict";

export function emptyLane() {
  return { line: -1, notes: [], points: [] };
}

function laneRange(notes) {
  const midis = notes.map((n) => n.midi);
  const low = Math.min(...midis), high = Math.max(...midis);
  return { low: low - 2, high: Math.max(high, low + 10) + 2 };
}

function fold(midi, range) {
  const centre = (range.low + range.high) / 2;
  while (midi - centre > 6) midi -= 12;
  while (centre - midi > 6) midi += 12;
  return midi;
}

// The lane of line `index` (`line` its chart line, with syllables): its notes, no points yet.
function laneOf(index, line) {
  const notes = line.syllables.filter((s) => s.midi !== undefined && s.midi !== null)
    .map((s) => ({ start: s.start, end: s.end, midi: s.midi, golden: s.kind === "golden" }));
  return { line: index, start: line.start, end: line.end, notes, points: [],
    range: notes.length ? laneRange(notes) : { low: 48, high: 72 } };
}

// `lane` for line `index` of `lines` (nil: no line now): the same lane while the line is the same, a new one when
// it changed.
export function laneFor(lane, lines, index) {
  if (index === null || index === undefined || !lines || !lines[index]) return lane;
  return lane.line === index ? lane : laneOf(index, lines[index]);
}

// A pitch (`midi`, less the key change in semitones) at song time `time`, added once per estimate when it falls in
// the lane's line.
export function addPitch(lane, time, midi, keySemitones) {
  if (lane.line < 0 || time < lane.start || time > lane.end || lane.notes.length === 0) return;
  const points = lane.points;
  if (points.length && points[points.length - 1].time === time) return;
  // Less the key change: the bars are the notes as the song now plays them (a singer who follows a key change up
  // stays on them).
  points.push({ time, midi: fold(midi - keySemitones, lane.range) });
}

// Draws `lane` on `canvas`, with the song's `position` as a line across it.
export function drawLane(canvas, lane, position) {
  if (!canvas) return;
  const g = canvas.getContext("2d");
  g.clearRect(0, 0, canvas.width, canvas.height);
  if (lane.line < 0) return;
  const { start, end, notes, points, range } = lane;
  const span = Math.max(0.001, end - start);
  const x = (t) => ((t - start) / span) * canvas.width;
  const rows = range.high - range.low;
  const y = (m) => canvas.height - ((m - range.low) / rows) * canvas.height;
  const h = canvas.height / rows;
  for (const n of notes) {
    g.fillStyle = n.golden ? "#ffb000" : "#4da3ff";
    g.fillRect(x(n.start), y(n.midi) - h / 2, Math.max(2, x(n.end) - x(n.start)), h * 0.8);
  }
  if (position >= start && position <= end) {
    g.fillStyle = "#ffffff55";
    g.fillRect(x(position), 0, 2, canvas.height);
  }
  g.fillStyle = "#ffd34d";
  for (const p of points) {
    g.beginPath();
    g.arc(x(p.time), y(p.midi), 4, 0, 2 * Math.PI);
    g.fill();
  }
}
