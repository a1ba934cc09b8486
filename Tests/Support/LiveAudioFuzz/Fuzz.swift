import CLibFuzzer
import Foundation
import FuzzTargets

#if canImport(Glibc)
import Glibc
#endif

// The fuzz targets as one executable. Built with `-sanitize=fuzzer,address -D FUZZING` (scripts/fuzz.sh) it is a
// libFuzzer binary: FUZZ_TARGET names the target, libFuzzer's own flags and corpus folders follow (its main hands
// them to LLVMFuzzerRunDriver: SwiftPM links an executable's entry point as `main`, so libFuzzer's own main is not
// used). Built plainly (as `swift build` does) it replays files: `LiveAudioFuzz TARGET FILE...`.

/// Set once, before the first input.
nonisolated(unsafe) private var selected: FuzzTarget?

private func complain(_ line: String) {
    FileHandle.standardError.write(Data((line + "\n").utf8))
}

private func target(named name: String?) -> FuzzTarget {
    guard let name, let target = FuzzTarget(rawValue: name) else {
        let names = FuzzTarget.allCases.map(\.rawValue).joined(separator: ", ")
        complain("LiveAudioFuzz: name a target (FUZZ_TARGET=NAME under libFuzzer), one of: \(names)")
        exit(2)
    }
    return target
}

@_cdecl("LLVMFuzzerInitialize")
public func fuzzerInitialize(
    _ argc: UnsafeMutablePointer<CInt>?, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?>?
) -> CInt {
    selected = target(named: getenv("FUZZ_TARGET").map { String(cString: $0) })
    return 0
}

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzerTestOneInput(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    let bytes = data.map { Array(UnsafeBufferPointer(start: $0, count: size)) } ?? []
    selected!.run(bytes)
    return 0
}

@main struct LiveAudioFuzz {
    static func main() {
        #if FUZZING
        var argc = CommandLine.argc
        var argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>? = CommandLine.unsafeArgv
        exit(LLVMFuzzerRunDriver(&argc, &argv) { data, size in fuzzerTestOneInput(data, size) })
        #else
        replay(CommandLine.arguments.dropFirst())
        #endif
    }

    static func replay(_ arguments: ArraySlice<String>) {
        let target = target(named: arguments.first)
        for path in arguments.dropFirst() {
            guard let data = FileManager.default.contents(atPath: path) else {
                complain("LiveAudioFuzz: cannot read \(path)")
                exit(1)
            }
            target.run([UInt8](data))
            print("\(target.rawValue): \(path) ok")
        }
    }
}
