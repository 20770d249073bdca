#!/bin/bash
touch /app/mine
