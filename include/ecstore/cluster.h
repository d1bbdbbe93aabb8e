// <ecstore/cluster.h>: a cluster of daemons on etcd as one Cache (ecstore::cluster::ClusterCache)
// -- cluster/cluster_cache.h. Thread rules: as the header it includes says.
#pragma once

#include "cluster/cluster_cache.h"
