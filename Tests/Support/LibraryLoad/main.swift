// Search as you type over a song library (`make bench`): songs picked at random, their artist's and title's first
// words typed a character at a time, each prefix searched as a phone's search box would; the latencies' median, p99
// and maximum printed.
// Usage: LibraryLoad DB [--songs N] [--seed S]
import AudioCore
import SongLibrary

#if canImport(Glibc)
import Glibc
#endif

func now() -> Double {
    var t = timespec()
    clock_gettime(CLOCK_MONOTONIC, &t)
    return Double(t.tv_sec) + Double(t.tv_nsec) / 1e9
}

var arguments = Array(CommandLine.arguments.dropFirst())
guard let path = arguments.first else {
    print("usage: LibraryLoad DB [--songs N] [--seed S]")
    exit(2)
}
var songCount = 200
var seed: UInt64 = 1
var i = 1
while i + 1 < arguments.count {
    if arguments[i] == "--songs" { songCount = Int(arguments[i + 1]) ?? songCount }
    if arguments[i] == "--seed" { seed = UInt64(arguments[i + 1]) ?? seed }
    i += 2
}
do {
    let library = try SongLibrary(path: path)
    let songs = try library.songs()
    var random = SplitMix64(seed: seed)
    var latencies: [Double] = []
    var found = 0
    for _ in 0..<songCount {
        let song = songs[Int(random.next() % UInt64(songs.count))]
        let typed = [song.artist.split(separator: " ").first, song.title.split(separator: " ").first].compactMap { $0 }.joined(separator: " ")
        var text = ""
        var hit = false
        for character in typed {
            text.append(character)
            let start = now()
            let results: [LibrarySong]
            do throws(AudioError) {
                results = try library.search(text, limit: 20)
            } catch {
                print("LibraryLoad: the search '\(text)' failed: \(error.message)")
                exit(1)
            }
            latencies.append(now() - start)
            if results.contains(where: { $0.id == song.id }) { hit = true }
        }
        if hit { found += 1 }
    }
    latencies.sort()
    func quantile(_ q: Double) -> Double { latencies[min(latencies.count - 1, Int(Double(latencies.count) * q))] * 1000 }
    print(
        "search as you type: \(latencies.count) searches over \(songs.count) songs (\(songCount) songs typed, \(found) found by their first words): median \(String(format: "%.2f", quantile(0.5))) ms, p90 \(String(format: "%.2f", quantile(0.9))) ms, p99 \(String(format: "%.2f", quantile(0.99))) ms, max \(String(format: "%.2f", latencies.last! * 1000)) ms"
    )
} catch {
    print("LibraryLoad: \(error)")
    exit(1)
}
