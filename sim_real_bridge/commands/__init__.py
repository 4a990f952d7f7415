"""The mirrored command path's pure logic: the safety gate between commands and the real robot."""
