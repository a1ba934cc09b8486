import AudioCore
import AudioDevices
#if canImport(Glibc)
import Glibc
#endif

/// The checks made before anything is opened, written once for the sessions, the renderers and the tool, so that
/// each problem gets the same message wherever it is met.
public enum Preflight {
    /// Throws unless the folder a file at `path` is written into exists (the current folder for a bare name).
    /// - Throws: ``/AudioCore/AudioError`` `.fileIO`: "cannot write '<path>': folder '<folder>' does not exist".
    public static func checkFolder(forWriting path: String) throws(AudioError) {
        let folder = FilePath.folder(of: path)
        guard isFolder(folder) else { throw AudioError(.fileIO, "cannot write '\(path)': folder '\(folder)' does not exist") }
    }

    /// Throws unless `folder` is an existing folder.
    /// - Throws: ``/AudioCore/AudioError`` `.fileIO`: "the <role> '<folder>' does not exist".
    public static func checkFolder(_ folder: String, role: String) throws(AudioError) {
        guard isFolder(folder) else { throw AudioError(.fileIO, "the \(role) '\(folder)' does not exist") }
    }

    private static func isFolder(_ path: String) -> Bool {
        var status = stat()
        return stat(path, &status) == 0 && status.st_mode & S_IFMT == S_IFDIR
    }
}

extension LoadedGraph {
    /// The graph's one `input` node, for a graph that is used as `role` ("a voice chain") with its input as
    /// `meaning` ("the microphone"); `source` names the graph in the message (its path).
    /// - Throws: ``/AudioCore/AudioError`` `.invalidGraphDescription`: "<role> needs exactly one node of type
    ///   "input" (<meaning>); '<source>' has <n>".
    public func onlyInput(as role: String, meaning: String, source: String) throws(AudioError) -> (id: String, unit: InputUnit) {
        let inputs = inputUnits
        guard inputs.count == 1 else {
            throw AudioError(
                .invalidGraphDescription,
                "\(role) needs exactly one node of type \"input\" (\(meaning)); '\(source)' has \(inputs.count)")
        }
        return inputs[0]
    }
}
