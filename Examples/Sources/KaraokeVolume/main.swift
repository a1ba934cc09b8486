// karaoke-volume: a karaoke session — the song plays, the singer hears their voice with its effects over it, the mix
// goes to any destinations — with the volumes changed live from the keyboard.
//
//   swift run karaoke-volume SONG [alsa|jack] [DESTINATION…]
//
// Then type a command and Enter: `a+` / `a-` the accompaniment ±2 dB, `v+` / `v-` the voice ±2 dB, `m` mutes or
// unmutes the voice, `k+` / `k-` the key a semitone up or down, `q` stops. DESTINATION: rtmp:// URLs or .m4a, .flv,
// .aac files, as for live-stream.
import Foundation
import LiveAudio

var arguments = Array(CommandLine.arguments.dropFirst())
guard !arguments.isEmpty else {
    print("usage: karaoke-volume SONG [alsa|jack] [DESTINATION…]")
    exit(2)
}
let song = arguments.removeFirst()
var backend = DeviceBackend.alsa
if let first = arguments.first, let named = DeviceBackend(rawValue: first) {
    backend = named
    arguments.removeFirst()
}

/// The terminal's lines, read on a thread of their own (readLine blocks), and an empty line every half second, so the
/// loop below notices the song's end without a key being pressed. When the input ends (`< /dev/null`), the song plays
/// to its end.
let (commands, input) = AsyncStream.makeStream(of: String.self)
Thread.detachNewThread {
    while let line = readLine() { input.yield(line.trimmingCharacters(in: .whitespaces)) }
}
let ticker = Task {
    while !Task.isCancelled {
        try? await Task.sleep(for: .milliseconds(500))
        input.yield("")
    }
}

do {
    var configuration = KaraokeSession.Configuration(song: song)
    configuration.backend = backend
    configuration.keyAdjustable = true          // a time-pitch unit in the song's path, so the key can change live
    let chain = "graphs/voice-chain.json"
    if FileManager.default.fileExists(atPath: chain) { configuration.voiceChain = chain }
    configuration.outputs = try arguments.map { (text: String) throws(AudioError) in
        try LiveStreamSession.Output(parsing: text)
    }
    let session = try KaraokeSession(configuration)
    try await session.start()
    print("singing \(song); a+ a- v+ v- m k+ k- q")

    for await command in commands {
        if session.songHasEnded { break }
        if command.isEmpty { continue }
        // Volumes, mutes and the key: from any thread but the render thread; the render thread ramps to them.
        switch command {
        case "a+": session.accompanimentVolume += 2
        case "a-": session.accompanimentVolume -= 2
        case "v+": session.voiceVolume += 2
        case "v-": session.voiceVolume -= 2
        case "m": session.isVoiceMuted.toggle()
        case "k+", "k-":
            do { try session.setKey(cents: session.keyCents + (command == "k+" ? 100 : -100)) } catch { print(error) }
        case "q": break
        default: print("? a+ a- v+ v- m k+ k- q")
        }
        if command == "q" { break }
        let s = session.snapshot()
        print(String(format: "%6.1f s  accompaniment %+.0f dB  voice %+.0f dB%@  key %+.0f cents",
                     s.position, session.accompanimentVolume, session.voiceVolume,
                     session.isVoiceMuted ? " (muted)" : "", session.keyCents))
    }
    ticker.cancel()
    let summary = await session.stop()      // completes the files, unpublishes
    print("sang \(String(format: "%.1f", summary.seconds)) s; \(summary.xruns) xruns; "
        + "loudness \(summary.loudness.summaryText)")
    if let error = summary.error { print("karaoke-volume: \(error)"); exit(1) }
} catch {
    print("karaoke-volume: \(error)")
    exit(1)
}
