import Foundation
import LiveAudio
import Synchronization
import Testing
import TestSupport

/// The scheduled file player. Most tests play a "ramp" file whose frame k holds (k + 1) / 2²⁰ — exact in Float32
/// and never 0 — so every output sample names the file frame it came from, and a schedule's output can be compared
/// with what it should be sample for sample.
@Suite("The scheduled file player (filePlayer)") struct FilePlayerTests {
    static func value(_ frame: Int) -> Float { Float(frame + 1) / 1_048_576 }

    static func rampFile(_ dir: TemporaryDirectory, frames: Int = 100_000) throws -> String {
        let path = dir.file("ramp.wav")
        try writeWAV(path, channels: [(0..<frames).map(value)])
        return path
    }

    /// The file frame a sample names (nil for silence).
    static func frame(_ sample: Float) -> Int? { sample == 0 ? nil : Int((sample * 1_048_576).rounded()) - 1 }

    /// Renders `player` alone in a mono graph for `frames` frames in cycles of `blocks` (cycled); `events[k]` runs
    /// before the first cycle that starts at or after frame k.
    static func run(
        _ player: FilePlayerUnit, frames: Int, blocks: [Int] = [480], worker: Bool = false,
        events: [Int: () throws -> Void] = [:]
    ) throws -> [Float] {
        let graph = try RenderGraph(format: try .graph(sampleRate: 48_000, channelCount: player.outputFormats[0].channelCount), maximumFrames: 4096)
        try graph.connect(try graph.addNode(player), to: graph.output)
        try graph.initialize()
        let readAhead = worker ? try ReadAheadWorker(units: graph.readingAheadUnits) : nil
        defer { readAhead?.stop() }
        let renderer = OfflineRenderer(graph: graph, readAhead: readAhead)
        var out: [Float] = []
        var pending = events.keys.sorted()
        var k = 0
        while out.count < frames {
            while let next = pending.first, next <= out.count {
                try events[next]!()
                pending.removeFirst()
            }
            let n = min(blocks[k % blocks.count], frames - out.count)
            k += 1
            out += try renderer.render(frames: n)[0]
        }
        return out
    }

    @Test func aRegionLoopsFromASampleTime() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let player = try FilePlayerUnit(path: try Self.rampFile(dir))
        let ends = LockedCounter()
        player.onEnd = { ends.increment() }
        // Scheduled before the graph exists: 5,000 frames from frame 1,000, three times, from sample time 777.
        try player.schedule(.init(startFrame: 1000, frameCount: 5000, loopCount: 2), at: 777)
        #expect(player.state == .scheduled && player.position == 1000 && !player.hasFinished)
        let total = player.totalFrames
        #expect(total == Int64(777 + 15_000), "\(String(describing: total))")
        let out = try Self.run(player, frames: 20_000, blocks: [97, 1024, 1, 4096, 333])
        let expected = [Float](repeating: 0, count: 777) + Array(repeating: (1000..<6000).map(Self.value), count: 3).flatMap { $0 }
        #expect(Array(out.prefix(expected.count)) == expected)
        #expect(out.suffix(from: expected.count).allSatisfy { $0 == 0 })
        #expect(player.state == .finished && player.hasFinished && player.completedSchedules == 1 && player.underruns == 0)
        #expect(ends.value == 1, "onEnd called \(ends.value) times")
    }

    @Test func aStartInThePastKeepsTheTimelineAndAnImmediateStartTakesTheNextCycle() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let player = try FilePlayerUnit(path: try Self.rampFile(dir))
        // At 10,000 a start at 4,000 is 6,000 frames late: file frame 6,000 plays at 10,000, faded in over 5 ms.
        let late = try Self.run(player, frames: 20_000, blocks: [1000], events: [10_000: { try player.schedule(at: 4000) }])
        #expect(late.prefix(10_000).allSatisfy { $0 == 0 })
        #expect(Array(late[10_240..<20_000]) == (10_240..<20_000).map { Self.value($0 - 4000) })
        for t in 10_000..<10_240 { #expect(abs(late[t]) <= Self.value(t - 4000) + 1e-9) }
        #expect(late[10_000] < Self.value(6000) / 100, "not faded in")

        let asap = try FilePlayerUnit(path: try Self.rampFile(dir))
        let out = try Self.run(asap, frames: 12_000, blocks: [1000], events: [5000: { try asap.schedule() }])
        // The region's own start: not faded.
        #expect(out.prefix(5000).allSatisfy { $0 == 0 })
        #expect(Array(out[5000..<12_000]) == (0..<7000).map(Self.value))
        #expect(asap.position == 7000 && asap.state == .playing)
    }

    @Test func seekPauseResumeAndStopWhileRunning() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let player = try FilePlayerUnit(path: try Self.rampFile(dir))
        try player.schedule()
        var afterSeek: Int64 = -1
        var paused: (FilePlayerUnit.State, Int64) = (.stopped, -1)
        var pausedLater: Int64 = -1
        var stopped = FilePlayerUnit.State.playing
        let out = try Self.run(
            player, frames: 48_000, blocks: [480],
            events: [
                9600: { try player.seek(toFrame: 50_000) },
                10_560: { afterSeek = player.position },
                19_200: { player.pause() },
                20_160: { paused = (player.state, player.position) },
                27_840: { pausedLater = player.position },
                28_800: { player.resume() },
                38_400: { player.stop() },
                39_360: { stopped = player.state },
            ])
        // The seek: the old material fades out, the new fades in within the cycle, then plays on from 50,000.
        let s = 10_200 - (Self.frame(out[10_200])! - 50_000)
        #expect((9600...10_080).contains(s), "the seek took effect at \(s)")
        #expect(Array(out[10_200..<19_200]) == (10_200..<19_200).map { Self.value(50_000 + $0 - s) })
        #expect(afterSeek == Int64(50_000 + 10_560 - s))
        for t in 9600..<s { #expect(abs(out[t]) <= Self.value(t) + 1e-9) }
        // Paused: silent within 5 ms, the position held.
        #expect(paused.0 == .paused && pausedLater == paused.1)
        #expect(out[(19_200 + 240)..<28_800].allSatisfy { $0 == 0 })
        // Resumed: on from the held position, faded in.
        let held = Int(paused.1)
        #expect(Array(out[(28_800 + 240)..<38_400]) == ((28_800 + 240)..<38_400).map { Self.value(held + $0 - 28_800) })
        // The fade-out's last frame (at 1/240) is the one before the held position: every frame taken was heard.
        #expect(abs(out[19_200 + 239] * 240 / Self.value(held - 1) - 1) < 1e-3, "\(out[19_200 + 239] * 1_048_576 * 240)")
        // Stopped: silent within 5 ms; not a finish.
        #expect(out[(38_400 + 240)...].allSatisfy { $0 == 0 })
        #expect(stopped == .stopped && player.hasFinished && player.completedSchedules == 0)
        #expect(throws: AudioError.self) { try player.seek(toFrame: 0) }
    }

    /// Where, at or after `from`, the frames of file frame `frame` on begin in `out`, faded in over 240 frames
    /// (1/240 … 1) or not; nil if they are not there exactly: nothing before `frame` and nothing dropped after it.
    static func segmentStart(_ out: [Float], from: Int, frame: Int, fadedIn: Bool, length: Int) -> Int? {
        for t in from..<(out.count - length) {
            let first = fadedIn ? value(frame) / 240 : value(frame)
            guard abs(out[t] - first) <= first * 1e-3 else { continue }
            var ok = true
            for j in 0..<length {
                let gain: Float = fadedIn && j < 240 ? Float(j + 1) / 240 : 1
                let expected = value(frame + j) * gain
                if abs(out[t + j] - expected) > expected * 1e-3 {
                    ok = false
                    break
                }
            }
            if ok { return t }
        }
        return nil
    }

    /// A player of a 480,000-frame ramp file, scheduled whole, alone in an initialized mono graph.
    static func rampPlayerGraph(_ dir: TemporaryDirectory) throws -> (FilePlayerUnit, RenderGraph) {
        let player = try FilePlayerUnit(path: try rampFile(dir, frames: 480_000))
        try player.schedule()
        let graph = try RenderGraph(format: mono, maximumFrames: 4096)
        try graph.connect(try graph.addNode(player), to: graph.output)
        try graph.initialize()
        return (player, graph)
    }

    /// A renderer that waits for its read-ahead worker before every cycle (as the virtual device and a render with
    /// a reader thread do), through seeks and new schedules while the ring still holds the earlier frames: every
    /// cycle comes, none waits for a read that never happens.
    @Test func aWaitingRendererGoesOnThroughSeeks() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let (player, graph) = try Self.rampPlayerGraph(dir)
        let worker = try ReadAheadWorker(units: graph.readingAheadUnits)
        defer { worker.stop() }
        let renderer = OfflineRenderer(graph: graph, readAhead: worker)
        let done = LockedCounter()
        let thread = Thread {
            for cycle in 0..<400 {
                if cycle % 40 == 20 { try? player.seek(toFrame: Int64(cycle) * 1_000) }
                if cycle % 100 == 70 { try? player.schedule(.init(startFrame: Int64(cycle) * 500, frameCount: 100_000)) }
                guard (try? renderer.render(frames: 480)) != nil else { return }
                done.increment()
            }
        }
        thread.start()
        let deadline = Date().addingTimeInterval(30)
        while done.value < 400, Date() < deadline { usleep(10_000) }
        #expect(done.value == 400, "\(done.value) of 400 cycles rendered in 30 s")
    }

    /// Seeks and a replacement while the ring is full of frames read ahead of them, rendered as a device renders:
    /// real-time cycles (the graph told so), paced at 10 ms, the reader on the read-ahead worker. Each lands on
    /// the frame asked for, faded in, with nothing before it and nothing dropped; no underrun. And offline, a seek
    /// 64 frames before the end of what was read ahead (the fade-out runs into the ring's next frames).
    @Test func seeksOnTheWorkerStartExactlyWhereAsked() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let (player, graph) = try Self.rampPlayerGraph(dir)
        graph.willRender(.realTime(maximumCycleFrames: 480))
        let worker = try ReadAheadWorker(units: graph.readingAheadUnits)
        defer { worker.stop() }
        try worker.waitUntilReady(frames: 480)
        var out: [Float] = []
        var held: Int64 = -1
        for cycle in 0..<300 {
            let t = cycle * 480
            switch cycle {
            case 50: try player.seek(toFrame: 200_000)
            case 100: try player.seek(toFrame: 300_000)
            case 150: try player.schedule(.init(startFrame: 400_000, frameCount: 20_000))
            case 180: player.pause()
            case 200: held = player.position
            case 210: player.resume()
            case 260: player.stop()
            default: break
            }
            guard let view = graph.renderCycle(frames: 480, timeStamp: RenderTimeStamp(sampleTime: Int64(t))) else {
                Issue.record("cycle \(cycle) not rendered")
                return
            }
            out += view[0]
            worker.requestIfNeeded()
            usleep(10_000)
        }
        #expect(player.underruns == 0, "\(player.underruns) underruns")
        #expect(Self.segmentStart(out, from: 0, frame: 0, fadedIn: false, length: 20_000) == 0)
        let first = Self.segmentStart(out, from: 50 * 480, frame: 200_000, fadedIn: true, length: 20_000)
        let second = Self.segmentStart(out, from: 100 * 480, frame: 300_000, fadedIn: true, length: 20_000)
        let third = Self.segmentStart(out, from: 150 * 480, frame: 400_000, fadedIn: true, length: 13_000)
        #expect(first != nil && second != nil && third != nil, "\(String(describing: first)) \(String(describing: second)) \(String(describing: third))")
        // Each within a few cycles of the command (the reader reads after the render has dropped what it read ahead).
        for (start, cycle) in [(first, 50), (second, 100), (third, 150)] {
            if let start { #expect(start - cycle * 480 < 10 * 480, "began \(start - cycle * 480) frames after the command") }
        }
        // Paused and resumed: on from the held frame, faded in; nothing after the region's end; silent after stop.
        #expect(held > 400_000 && Self.segmentStart(out, from: 210 * 480, frame: Int(held), fadedIn: true, length: 3000) == 210 * 480)
        #expect(out[(260 * 480 + 240)...].allSatisfy { $0 == 0 })

        // Offline, 480-frame cycles: the seek at 16,320 finds 64 frames left of the first 16,384 read.
        let offline = try FilePlayerUnit(path: dir.file("ramp.wav"))
        try offline.schedule()
        let rendered = try Self.run(offline, frames: 40_000, events: [16_320: { try offline.seek(toFrame: 100_000) }])
        let start = Self.segmentStart(rendered, from: 16_320, frame: 100_000, fadedIn: true, length: 20_000)
        #expect(start != nil && start! - 16_320 <= 960, "\(String(describing: start))")
        #expect(offline.underruns == 0)
    }

    /// A 437 Hz sine at half scale: with fades, no step between samples is larger than the sine's own (plus the
    /// fade's slope); a hard cut at the seek would step by more than 0.3 (checked, so the test can fail).
    @Test func changesWhileRunningDoNotClick() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let frames = 10 * 48_000
        let sine = (0..<frames).map { Float(0.5 * sin(2 * Double.pi * 437 * Double($0) / 48_000)) }
        try writeWAV(dir.file("sine.wav"), channels: [sine])
        let player = try FilePlayerUnit(path: dir.file("sine.wav"))
        try player.schedule(.init(startFrame: 0, frameCount: nil, loopCount: 0))
        // Seek at 24,480 to a frame whose sample is the opposite of the one that would play.
        let now = sine[24_480]
        let target = (100_000..<200_000).first { abs(sine[$0] + now) < 0.01 && (sine[$0 + 1] - sine[$0]) * (sine[24_481] - now) < 0 }!
        #expect(abs(sine[target] - now) > 0.3)
        let out = try Self.run(
            player, frames: 6 * 48_000, blocks: [480, 256, 1024],
            events: [
                24_480: { try player.seek(toFrame: Int64(target)) },
                72_000: { player.pause() },
                96_000: { player.resume() },
                144_000: { try player.schedule(.init(startFrame: 300_000, frameCount: 96_000), at: nil) },
                192_000: { try player.seek(toFrame: 310_000) },
                240_000: { player.stop() },
            ])
        let sineStep = Float(0.5 * 2 * Double.pi * 437 / 48_000)
        let bound = sineStep + 0.5 / 240 + 1e-4
        var worst: (Float, Int) = (0, 0)
        for t in 1..<out.count where abs(out[t] - out[t - 1]) > worst.0 { worst = (abs(out[t] - out[t - 1]), t) }
        #expect(worst.0 <= bound, "a step of \(worst.0) at \(worst.1) (the sine's own is \(sineStep))")
        #expect(out[250_000...].allSatisfy { $0 == 0 })
    }

    /// Compressed files play as the decoder reads them: a region of an MP3 and of an M4A, looped, read ahead on
    /// the worker thread, equals the same frames of the whole file decoded by the file source.
    @Test func compressedFilesOnTheReadAheadWorker() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        for name in ["in.mp3", "in.m4a"] {
            let path = dir.file(name)
            try FFmpeg.run(["-f", "lavfi", "-i", "sine=frequency=330:sample_rate=48000:duration=3", "-ac", "2", "-b:a", "128k", path])
            let whole = try render(FileSourceUnit(path: path, sampleRate: 48_000), frames: 144_000, blockSizes: [1024])
            let player = try FilePlayerUnit(path: path, sampleRate: 48_000)
            let ends = LockedCounter()
            player.onEnd = { ends.increment() }
            try player.schedule(.init(startFrame: 30_000, frameCount: 40_000, loopCount: 1), at: 0)
            let graph = try RenderGraph(format: stereo, maximumFrames: 4096)
            try graph.connect(try graph.addNode(player), to: graph.output)
            try graph.initialize()
            let worker = try ReadAheadWorker(units: graph.readingAheadUnits)
            let renderer = OfflineRenderer(graph: graph, readAhead: worker)
            var out: [[Float]] = [[], []]
            while out[0].count < 90_000 {
                let view = try renderer.render(frames: 1000)
                for c in 0..<2 { out[c] += view[c] }
            }
            try waitUntil("onEnd on the worker", seconds: 5) { ends.value == 1 }
            worker.stop()
            for c in 0..<2 {
                let region = Array(whole[c][30_000..<70_000])
                #expect(Array(out[c][0..<40_000]) == region, "\(name) channel \(c), first pass")
                #expect(Array(out[c][40_000..<80_000]) == region, "\(name) channel \(c), second pass")
                #expect(out[c][80_000...].allSatisfy { $0 == 0 })
            }
            #expect(player.underruns == 0 && player.hasFinished)
        }
    }

    @Test func aGraphResetStartsTheScheduleOver() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let player = try FilePlayerUnit(path: try Self.rampFile(dir))
        try player.schedule(.init(startFrame: 500, frameCount: 3000), at: 100)
        let graph = try RenderGraph(format: mono, maximumFrames: 4096)
        try graph.connect(try graph.addNode(player), to: graph.output)
        let ends = LockedCounter()
        player.onEnd = { ends.increment() }
        let first = try renderOffline(graph, frames: 4000, blockSizes: [300])
        #expect(player.hasFinished && player.state == .finished)
        graph.reset()
        #expect(!player.hasFinished && player.state == .scheduled)
        // Reset again in the middle of playing.
        _ = try renderOffline(graph, frames: 1500, blockSizes: [500])
        #expect(player.state == .playing)
        graph.reset()
        let second = try renderOffline(graph, frames: 4000, blockSizes: [700])
        #expect(first == second)
        #expect(Array(first[0][100..<3100]) == (500..<3500).map(Self.value))
        #expect(player.hasFinished && player.completedSchedules == 2)
        // The end of the second is told before the next cycle (the first at the one after its end).
        _ = try renderOffline(graph, frames: 1)
        #expect(ends.value == 2, "onEnd called \(ends.value) times")
    }

    @Test func badSchedulesAreErrorsThatSayWhy() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let player = try FilePlayerUnit(path: try Self.rampFile(dir, frames: 10_000))
        func message(_ body: () throws -> Void) -> String {
            do {
                try body()
                return "accepted"
            } catch let error as AudioError {
                return error.message
            } catch {
                return "\(error)"
            }
        }
        #expect(message { try player.schedule(.init(startFrame: 10_000)) }.contains("outside the file (10000 frames"))
        #expect(message { try player.schedule(.init(startFrame: 9000, frameCount: 2000)) }.contains("runs past the file's end"))
        #expect(message { try player.schedule(.init(startFrame: 0, frameCount: 0)) }.contains("at least one frame"))
        #expect(message { try player.schedule(.init(loopCount: -1)) }.contains("loop count"))
        #expect(message { try player.schedule(at: -5) }.contains("sample time"))
        #expect(message { try player.seek(toFrame: 10) }.contains("schedule a region first"))
        try player.schedule(.init(startFrame: 1000, frameCount: 1000))
        #expect(message { try player.seek(toFrame: 2000) }.contains("outside the scheduled region (1000 ..< 2000)"))
        #expect(player.state == .scheduled)
        #expect(throws: AudioError.self) { try FilePlayerUnit(path: dir.file("missing.wav")) }
    }

    @Test func graphFilesScheduleARegion() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        _ = try Self.rampFile(dir)
        func json(_ fields: [String: String]) -> String {
            var node: [String: String] = ["startTime": "0.5", "startFrame": "1000", "frameCount": "4800", "loopCount": "1"]
            node.merge(fields) { $1 }
            let extra = node.sorted { $0.key < $1.key }.map { "\"\($0.key)\": \($0.value)" }.joined(separator: ", ")
            return """
                {"sampleRate": 48000, "channels": 1,
                 "nodes": [{"id": "song", "type": "filePlayer", "path": "ramp.wav", \(extra)}],
                 "connections": [{"from": "song", "to": "output"}]}
                """
        }
        try json([:]).write(toFile: dir.file("g.json"), atomically: true, encoding: .utf8)
        let loaded = try GraphFile.load(path: dir.file("g.json"))
        #expect(try FileRenderer(loaded: loaded).framesUntilSourcesEnd() == 24_000 + 9600)
        _ = try FileRenderer(loaded: loaded).render(to: dir.file("out.wav"))
        let out = try FFmpeg.decode(dir.file("out.wav"), channels: 1)[0]
        #expect(out.count == 33_600)
        // The render ends with the schedule: its last cycle played the last frame.
        #expect((loaded.units["song"] as? FilePlayerUnit)?.hasFinished == true)
        #expect(out.prefix(24_000).allSatisfy { $0 == 0 })
        let pass = (1000..<5800).map(Self.value)
        #expect(Array(out[24_000...]) == pass + pass)
        for (field, value, says) in [
            ("frameCount", "0", "must be between 1"), ("loopCount", "-1", "must be between 0"),
            ("startFrame", "200000", "outside the file"), ("frameCount", "99500", "runs past the file's end"),
            ("startTime", "-1", "must be between 0"), ("loopForever", "1", "true or false"),
        ] {
            do {
                _ = try GraphFile.load(json: json([field: value]), baseDirectory: dir.path)
                Issue.record("\(field) \(value) accepted")
            } catch {
                #expect(error.message.contains("field '\(field)'") && error.message.contains(says), "\(error)")
            }
        }
    }
}
