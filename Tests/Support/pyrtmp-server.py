#!/usr/bin/env python3
"""pyrtmp's own server (the PyPI package's SimpleRTMPController, unchanged in how it speaks RTMP), recording the
audio it receives to an FLV file with pyrtmp's FLV writer, for the publisher's interoperability tests.

    .build/test-venv/bin/python3 pyrtmp-server.py --port PORT --record OUT.flv

Listens on 127.0.0.1 only, prints "listening 127.0.0.1:PORT" once ready, serves one publisher, prints "audio
messages N" when it has gone, and exits.
"""
import argparse
import asyncio
import logging
import sys

from pyrtmp import StreamClosedException
from pyrtmp.flv import FLVFileWriter, FLVMediaType
from pyrtmp.rtmp import RTMPProtocol, SimpleRTMPController
from pyrtmp.session_manager import SessionManager


class RecordingController(SimpleRTMPController):
    def __init__(self, record, done):
        super().__init__()
        self.record = record
        self.done = done
        self.audio = 0
        self.file = None

    async def on_ns_publish(self, session: SessionManager, message) -> None:
        self.file = FLVFileWriter(output=self.record)
        await super().on_ns_publish(session, message)

    async def on_audio_message(self, session: SessionManager, message) -> None:
        if self.file is not None:
            self.file.write(message.timestamp, message.payload, FLVMediaType.AUDIO)
            self.audio += 1
        await super().on_audio_message(session, message)

    async def on_stream_closed(self, session: SessionManager, exception: StreamClosedException) -> None:
        await super().on_stream_closed(session, exception)

    async def cleanup(self, session: SessionManager) -> None:
        if self.file is not None:
            self.file.close()
        print("audio messages", self.audio, flush=True)
        await super().cleanup(session)
        if not self.done.done():
            self.done.set_result(None)


async def main():
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--record", required=True)
    a = p.parse_args()
    logging.getLogger().setLevel(logging.INFO)
    loop = asyncio.get_running_loop()
    done = loop.create_future()
    controller = RecordingController(a.record, done)
    server = await loop.create_server(lambda: RTMPProtocol(controller=controller), host="127.0.0.1", port=a.port)
    await server.start_serving()
    print(f"listening 127.0.0.1:{a.port}", flush=True)
    await done
    server.close()


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
