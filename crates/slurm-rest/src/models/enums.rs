//! String enums of the v0.0.44 data parser, each with an `Other` fallback for values a newer Slurm adds.

use crate::models::slurm_enum;

slurm_enum! {
    /// State of a job (`job_state[]`); a job carries a base state plus flag states such as `COMPLETING`.
    JobState {
        Pending = "PENDING",
        Running = "RUNNING",
        Suspended = "SUSPENDED",
        Completed = "COMPLETED",
        Cancelled = "CANCELLED",
        Failed = "FAILED",
        Timeout = "TIMEOUT",
        NodeFail = "NODE_FAIL",
        Preempted = "PREEMPTED",
        BootFail = "BOOT_FAIL",
        Deadline = "DEADLINE",
        OutOfMemory = "OUT_OF_MEMORY",
        LaunchFailed = "LAUNCH_FAILED",
        Requeued = "REQUEUED",
        RequeueHold = "REQUEUE_HOLD",
        SpecialExit = "SPECIAL_EXIT",
        Resizing = "RESIZING",
        Configuring = "CONFIGURING",
        Completing = "COMPLETING",
        Stopped = "STOPPED",
        ReconfigFail = "RECONFIG_FAIL",
        PowerUpNode = "POWER_UP_NODE",
        Revoked = "REVOKED",
        RequeueFed = "REQUEUE_FED",
        ResvDelHold = "RESV_DEL_HOLD",
        Signaling = "SIGNALING",
        StageOut = "STAGE_OUT",
        Expediting = "EXPEDITING",
    }
}

slurm_enum! {
    /// Job flag (`flags[]` of a job), e.g. `EXTERNAL_JOB`.
    JobFlag {
        KillInvalidDependency = "KILL_INVALID_DEPENDENCY",
        NoKillInvalidDependency = "NO_KILL_INVALID_DEPENDENCY",
        HasStateDirectory = "HAS_STATE_DIRECTORY",
        TestingBackfill = "TESTING_BACKFILL",
        GresBindingEnforced = "GRES_BINDING_ENFORCED",
        TestNowOnly = "TEST_NOW_ONLY",
        SendJobEnvironment = "SEND_JOB_ENVIRONMENT",
        SpreadJob = "SPREAD_JOB",
        PreferMinimumNodeCount = "PREFER_MINIMUM_NODE_COUNT",
        JobKillHurry = "JOB_KILL_HURRY",
        SkipTresStringAccounting = "SKIP_TRES_STRING_ACCOUNTING",
        SiblingClusterUpdateOnly = "SIBLING_CLUSTER_UPDATE_ONLY",
        HeterogeneousJob = "HETEROGENEOUS_JOB",
        ExactTaskCountRequested = "EXACT_TASK_COUNT_REQUESTED",
        ExactCpuCountRequested = "EXACT_CPU_COUNT_REQUESTED",
        TestingWholeNodeBackfill = "TESTING_WHOLE_NODE_BACKFILL",
        TopPriorityJob = "TOP_PRIORITY_JOB",
        AccrueCountCleared = "ACCRUE_COUNT_CLEARED",
        GresBindingDisabled = "GRES_BINDING_DISABLED",
        JobWasRunning = "JOB_WAS_RUNNING",
        JobAccrueTimeReset = "JOB_ACCRUE_TIME_RESET",
        CronJob = "CRON_JOB",
        ExactMemoryRequested = "EXACT_MEMORY_REQUESTED",
        ExternalJob = "EXTERNAL_JOB",
        UsingDefaultAccount = "USING_DEFAULT_ACCOUNT",
        UsingDefaultPartition = "USING_DEFAULT_PARTITION",
        UsingDefaultQos = "USING_DEFAULT_QOS",
        UsingDefaultWckey = "USING_DEFAULT_WCKEY",
        Dependent = "DEPENDENT",
        Magnetic = "MAGNETIC",
        PartitionAssigned = "PARTITION_ASSIGNED",
        BackfillAttempted = "BACKFILL_ATTEMPTED",
        SchedulingAttempted = "SCHEDULING_ATTEMPTED",
        StepmgrEnabled = "STEPMGR_ENABLED",
        SpreadSegments = "SPREAD_SEGMENTS",
        ConsolidateSegments = "CONSOLIDATE_SEGMENTS",
        ExpeditedRequeue = "EXPEDITED_REQUEUE",
    }
}

slurm_enum! {
    /// Node state (`state[]` of a node, and the states an update may set, e.g. `DRAIN`, `RESUME`, `UNDRAIN`).
    NodeState {
        Invalid = "INVALID",
        Unknown = "UNKNOWN",
        Down = "DOWN",
        Idle = "IDLE",
        Allocated = "ALLOCATED",
        Error = "ERROR",
        Mixed = "MIXED",
        Future = "FUTURE",
        External = "EXTERNAL",
        Reserved = "RESERVED",
        Undrain = "UNDRAIN",
        Cloud = "CLOUD",
        Resume = "RESUME",
        Drain = "DRAIN",
        Completing = "COMPLETING",
        NotResponding = "NOT_RESPONDING",
        PoweredDown = "POWERED_DOWN",
        Fail = "FAIL",
        PoweringUp = "POWERING_UP",
        Maintenance = "MAINTENANCE",
        RebootRequested = "REBOOT_REQUESTED",
        RebootCanceled = "REBOOT_CANCELED",
        PoweringDown = "POWERING_DOWN",
        DynamicFuture = "DYNAMIC_FUTURE",
        RebootIssued = "REBOOT_ISSUED",
        Planned = "PLANNED",
        InvalidReg = "INVALID_REG",
        PowerDown = "POWER_DOWN",
        PowerUp = "POWER_UP",
        PowerDrain = "POWER_DRAIN",
        DynamicNorm = "DYNAMIC_NORM",
        Blocked = "BLOCKED",
    }
}

slurm_enum! {
    /// Job sharing mode (`shared[]`): `none` asks for exclusive nodes.
    Shared {
        None = "none",
        Oversubscribe = "oversubscribe",
        User = "user",
        Mcs = "mcs",
        Topo = "topo",
    }
}

slurm_enum! {
    /// Flag for cancelling or signalling a job (`flags` query of DELETE /job/{id}).
    SignalFlag {
        BatchJob = "BATCH_JOB",
        ArrayTask = "ARRAY_TASK",
        FullStepsOnly = "FULL_STEPS_ONLY",
        FullJob = "FULL_JOB",
        FederationRequeue = "FEDERATION_REQUEUE",
        Hurry = "HURRY",
        OutOfMemory = "OUT_OF_MEMORY",
        NoSiblingJobs = "NO_SIBLING_JOBS",
        ReservationJob = "RESERVATION_JOB",
        Verbose = "VERBOSE",
        CronJobs = "CRON_JOBS",
        WarningSent = "WARNING_SENT",
    }
}

slurm_enum! {
    /// Reservation flag (`flags[]` of a reservation).
    ReservationFlag {
        Maint = "MAINT",
        NoMaint = "NO_MAINT",
        Daily = "DAILY",
        NoDaily = "NO_DAILY",
        Weekly = "WEEKLY",
        NoWeekly = "NO_WEEKLY",
        IgnoreJobs = "IGNORE_JOBS",
        NoIgnoreJobs = "NO_IGNORE_JOBS",
        AnyNodes = "ANY_NODES",
        NoAnyNodes = "NO_ANY_NODES",
        Static = "STATIC",
        NoStatic = "NO_STATIC",
        PartNodes = "PART_NODES",
        NoPartNodes = "NO_PART_NODES",
        Overlap = "OVERLAP",
        SpecNodes = "SPEC_NODES",
        TimeFloat = "TIME_FLOAT",
        Replace = "REPLACE",
        AllNodes = "ALL_NODES",
        PurgeComp = "PURGE_COMP",
        Weekday = "WEEKDAY",
        NoWeekday = "NO_WEEKDAY",
        Weekend = "WEEKEND",
        NoWeekend = "NO_WEEKEND",
        Flex = "FLEX",
        NoFlex = "NO_FLEX",
        DurationPlus = "DURATION_PLUS",
        DurationMinus = "DURATION_MINUS",
        NoHoldJobsAfterEnd = "NO_HOLD_JOBS_AFTER_END",
        ReplaceDown = "REPLACE_DOWN",
        NoPurgeComp = "NO_PURGE_COMP",
        Magnetic = "MAGNETIC",
        NoMagnetic = "NO_MAGNETIC",
        Skip = "SKIP",
        Hourly = "HOURLY",
        NoHourly = "NO_HOURLY",
        UserDelete = "USER_DELETE",
        ForceStart = "FORCE_START",
        NoUserDelete = "NO_USER_DELETE",
        Reoccurring = "REOCCURRING",
        TresPerNode = "TRES_PER_NODE",
    }
}

slurm_enum! {
    /// Partition state (`partition.state[]`).
    PartitionState {
        Inactive = "INACTIVE",
        Unknown = "UNKNOWN",
        Up = "UP",
        Down = "DOWN",
        Drain = "DRAIN",
    }
}

impl JobState {
    /// True for a base state (a job has exactly one: PENDING, RUNNING, SUSPENDED, COMPLETED,
    /// CANCELLED, FAILED, TIMEOUT, NODE_FAIL, PREEMPTED, BOOT_FAIL, DEADLINE, OUT_OF_MEMORY);
    /// false for flag states such as COMPLETING and for values this client does not know.
    pub fn is_base(&self) -> bool {
        use JobState::*;
        matches!(
            self,
            Pending
                | Running
                | Suspended
                | Completed
                | Cancelled
                | Failed
                | Timeout
                | NodeFail
                | Preempted
                | BootFail
                | Deadline
                | OutOfMemory
        )
    }
}
