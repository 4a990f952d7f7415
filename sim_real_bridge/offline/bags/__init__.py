"""Reading rosbag2 bags and MCAP files: topics as numpy columns, or message by message.

    with open_bags(["run1/", "run2.mcap"]) as bags:
        print(bags.topics())
        joints = bags.read_columns("/real/joint_states", expected_type=JOINT_STATE)
"""

from sim_real_bridge.offline.bags.columns import (
    IMU,
    JOINT_STATE,
    NS_PER_S,
    POSE_STAMPED,
    WRENCH_STAMPED,
    Columns,
    ImuColumns,
    JointStateColumns,
    PoseColumns,
    WrenchColumns,
    columns_from_raw,
)
from sim_real_bridge.offline.bags.direct import INJECTION_ARRAY, TIME, injection_array_parser, time_parser
from sim_real_bridge.offline.bags.open import BagSet, TopicInfo, load_metadata_yaml, open_bags
from sim_real_bridge.offline.bags.raw import ChannelInfo, RawMessages

__all__ = [
    "IMU", "INJECTION_ARRAY", "JOINT_STATE", "NS_PER_S", "POSE_STAMPED", "TIME", "WRENCH_STAMPED", "BagSet",
    "ChannelInfo", "Columns", "ImuColumns", "JointStateColumns", "PoseColumns", "RawMessages", "TopicInfo",
    "WrenchColumns", "columns_from_raw", "injection_array_parser", "load_metadata_yaml", "open_bags", "time_parser",
]
